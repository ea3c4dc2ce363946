// Hand-written matchers for the pre-tokenizer regexes. Each matcher returns the length (in code
// points) of the regex's leftmost-alternative match at a position, mirroring its backtracking.
#include "tokenizer/pre-tokenizer.h"

#include <cstdint>

#include "tokenizer/utf8.h"

namespace hearth {
namespace {

constexpr uint32_t kInvalid = 0xFFFFFFFF;  // a byte that is not valid UTF-8

struct Cps {
  std::vector<uint32_t> cp;
  std::vector<size_t> off;  // byte offset of each code point, plus the end
  size_t n() const { return cp.size(); }
  bool letter(size_t i) const { return i < n() && utf8::is_letter(cp[i]); }
  bool number(size_t i) const { return i < n() && utf8::is_number(cp[i]); }
  bool space(size_t i) const { return i < n() && utf8::is_whitespace(cp[i]); }
  bool is(size_t i, uint32_t c) const { return i < n() && cp[i] == c; }
  bool newline(size_t i) const { return is(i, '\r') || is(i, '\n'); }
  bool other(size_t i) const { return i < n() && !letter(i) && !number(i) && !space(i); }
};

Cps to_cps(std::string_view text) {
  Cps c;
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp;
    const int len = utf8::decode(text, pos, &cp);
    c.cp.push_back(len > 0 ? cp : kInvalid);
    c.off.push_back(pos);
    pos += len > 0 ? len : 1;
  }
  c.off.push_back(text.size());
  return c;
}

uint32_t fold(uint32_t c) {  // the case folding (?i:) needs for the contraction letters
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';  // LATIN SMALL LETTER LONG S folds to 's'
  return c;
}

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive.
size_t contraction(const Cps& c, size_t i, bool icase) {
  if (!c.is(i, '\'') || i + 1 >= c.n()) return 0;
  auto at = [&](size_t k) { return k < c.n() ? (icase ? fold(c.cp[k]) : c.cp[k]) : 0u; };
  const uint32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

size_t run(const Cps& c, size_t j, bool (Cps::*pred)(size_t) const) {
  while ((c.*pred)(j)) ++j;
  return j;
}

// \s+(?!\S) then \s+: a whitespace run, leaving its last character for the next piece when a
// non-space follows (so " word" keeps its space).
size_t whitespace_tail(const Cps& c, size_t i) {
  const size_t k = run(c, i, &Cps::space);
  if (k == c.n() || k - i < 2) return k - i;
  return k - 1 - i;
}

size_t match_gpt2(const Cps& c, size_t i) {
  if (size_t m = contraction(c, i, false)) return m;
  const size_t j = c.is(i, ' ') ? i + 1 : i;
  if (c.letter(j)) return run(c, j, &Cps::letter) - i;
  if (c.number(j)) return run(c, j, &Cps::number) - i;
  if (c.other(j)) return run(c, j, &Cps::other) - i;
  if (c.space(i)) return whitespace_tail(c, i);
  return 1;
}

size_t match_llama3(const Cps& c, size_t i, size_t max_digits) {
  if (size_t m = contraction(c, i, true)) return m;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (i < c.n() && !c.newline(i) && !c.letter(i) && !c.number(i) && c.letter(i + 1)) {
    return run(c, i + 1, &Cps::letter) - i;
  }
  if (c.letter(i)) return run(c, i, &Cps::letter) - i;
  // \p{N}{1,max}
  if (c.number(i)) {
    size_t j = i;
    while (j - i < max_digits && c.number(j)) ++j;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t j = c.is(i, ' ') ? i + 1 : i;
  if (c.other(j)) return run(c, run(c, j, &Cps::other), &Cps::newline) - i;
  if (c.space(i)) {
    // \s*[\r\n]+: through the last newline of the whitespace run.
    const size_t k = run(c, i, &Cps::space);
    for (size_t m = k; m > i; --m) {
      if (c.newline(m - 1)) return m - i;
    }
    return whitespace_tail(c, i);
  }
  return 1;
}

void split_pattern(PreTokPattern p, std::string_view text, size_t base,
                   std::vector<std::pair<size_t, size_t>>& out) {
  const Cps c = to_cps(text);
  size_t i = 0;
  size_t gap = 0;  // start of text not yet emitted (only kDigits leaves gaps)
  while (i < c.n()) {
    size_t len = 1;
    switch (p) {
      case PreTokPattern::kGpt2:
        len = match_gpt2(c, i);
        break;
      case PreTokPattern::kLlama3:
        len = match_llama3(c, i, 3);
        break;
      case PreTokPattern::kQwen2:
        len = match_llama3(c, i, 1);
        break;
      case PreTokPattern::kDigits:
        if (!c.number(i)) {
          ++i;
          continue;
        }
        len = 1;
        break;
    }
    if (gap < i) out.emplace_back(base + c.off[gap], base + c.off[i]);
    out.emplace_back(base + c.off[i], base + c.off[i + len]);
    i += len;
    gap = i;
  }
  if (gap < c.n()) out.emplace_back(base + c.off[gap], base + c.off[c.n()]);
}

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_for_gguf(std::string_view pre) {
  using P = PreTokPattern;
  if (pre == "gpt-2" || pre == "gpt2" || pre == "phi-2" || pre == "jina-es" || pre == "jina-de" ||
      pre == "roberta-bpe" || pre == "mpt" || pre == "olmo") {
    return PreTokenizer{P::kGpt2};
  }
  if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3" || pre == "dbrx" ||
      pre == "smaug-bpe" || pre == "falcon3" || pre == "pixtral") {
    return PreTokenizer{P::kLlama3};
  }
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2") {
    return PreTokenizer{P::kQwen2};
  }
  if (pre == "starcoder" || pre == "refact" || pre == "smollm" || pre == "codeshell") {
    return PreTokenizer{P::kDigits, P::kGpt2};
  }
  return std::nullopt;
}

std::optional<PreTokPattern> pre_tok_pattern_for_regex(std::string_view regex) {
  static constexpr std::string_view kGpt2 =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == kGpt2) return PreTokPattern::kGpt2;
  if (regex == kLlama3) return PreTokPattern::kLlama3;
  if (regex == kQwen2) return PreTokPattern::kQwen2;
  if (regex == R"(\p{N})") return PreTokPattern::kDigits;
  return std::nullopt;
}

std::vector<std::pair<size_t, size_t>> pre_tokenize(const PreTokenizer& pre,
                                                    std::string_view text) {
  std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}};
  if (text.empty()) return {};
  for (PreTokPattern p : pre) {
    std::vector<std::pair<size_t, size_t>> next;
    for (auto [b, e] : pieces) split_pattern(p, text.substr(b, e - b), b, next);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace hearth
