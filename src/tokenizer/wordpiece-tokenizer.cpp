// WordPiece encoding: BERT's normalizer and pre-tokenizer over code points (ICU for case,
// decomposition and categories), then greedy longest-match pieces per word.
#include "tokenizer/wordpiece-tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "tokenizer/utf8.h"

namespace hearth {
namespace {

constexpr std::string_view kPhantomSpace = "\xE2\x96\x81";  // U+2581, llama.cpp's word start

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp;
    const int n = utf8::decode(s, pos, &cp);
    out.push_back(n > 0 ? cp : utf8::kReplacement);
    pos += n > 0 ? n : 1;
  }
  return out;
}

// The CJK Unified Ideograph blocks BERT puts spaces around (not kana or Hangul).
bool is_cjk_ideograph(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_bert_whitespace(uint32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
         u_charType(UChar32(c)) == U_SPACE_SEPARATOR;
}

bool is_bert_control(uint32_t c) {  // Cc / Cf other than \t \n \r
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const int8_t t = u_charType(UChar32(c));
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR;
}

bool is_bert_punctuation(uint32_t c) {  // ASCII punctuation (so $ + < = > ^ ` | ~) or Unicode P
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  return (U_GET_GC_MASK(UChar32(c)) & U_GC_P_MASK) != 0;
}

std::u16string to_utf16(const std::vector<uint32_t>& cps) {
  std::u16string s;
  for (uint32_t c : cps) {
    if (c >= 0x10000) {
      s.push_back(char16_t(0xD7C0 + (c >> 10)));
      s.push_back(char16_t(0xDC00 | (c & 0x3FF)));
    } else {
      s.push_back(char16_t(c));
    }
  }
  return s;
}

std::vector<uint32_t> from_utf16(const std::u16string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size(); ++i) {
    uint32_t c = s[i];
    if (c >= 0xD800 && c <= 0xDBFF && i + 1 < s.size())
      c = 0x10000 + ((c - 0xD800) << 10) + (s[++i] - 0xDC00);
    out.push_back(c);
  }
  return out;
}

// Full Unicode lowercasing (Python's str.lower(): "İ" becomes "i̇").
std::vector<uint32_t> lower(const std::vector<uint32_t>& cps) {
  const std::u16string in = to_utf16(cps);
  std::u16string out(in.size() * 3 + 4, u'\0');
  UErrorCode err = U_ZERO_ERROR;
  const int32_t n =
      u_strToLower(reinterpret_cast<UChar*>(out.data()), int32_t(out.size()),
                   reinterpret_cast<const UChar*>(in.data()), int32_t(in.size()), "", &err);
  if (U_FAILURE(err)) return cps;
  out.resize(size_t(n));
  return from_utf16(out);
}

// NFD, then every non-spacing mark (Mn) dropped: "café" -> "cafe".
std::vector<uint32_t> strip_accents(const std::vector<uint32_t>& cps) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  if (U_FAILURE(err)) return cps;
  const std::u16string in = to_utf16(cps);
  std::u16string out(in.size() * 4 + 4, u'\0');
  const int32_t n =
      unorm2_normalize(nfd, reinterpret_cast<const UChar*>(in.data()), int32_t(in.size()),
                       reinterpret_cast<UChar*>(out.data()), int32_t(out.size()), &err);
  if (U_FAILURE(err)) return cps;
  out.resize(size_t(n));
  std::vector<uint32_t> kept;
  for (uint32_t c : from_utf16(out)) {
    if (u_charType(UChar32(c)) != U_NON_SPACING_MARK) kept.push_back(c);
  }
  return kept;
}

}  // namespace

std::vector<std::string> bert_pre_tokenize(std::string_view text, bool lowercase, bool strip) {
  // Clean-up: drop NUL, U+FFFD and control characters; white space becomes a word break; CJK
  // ideographs become words of their own.
  std::vector<std::vector<uint32_t>> words(1);
  auto brk = [&] {
    if (!words.back().empty()) words.emplace_back();
  };
  for (uint32_t c : code_points(text)) {
    if (c == 0 || c == utf8::kReplacement || is_bert_control(c)) continue;
    if (is_bert_whitespace(c)) {
      brk();
    } else if (is_cjk_ideograph(c)) {
      brk();
      words.back().push_back(c);
      brk();
    } else {
      words.back().push_back(c);
    }
  }
  std::vector<std::string> out;
  for (auto& w : words) {
    if (w.empty()) continue;
    if (lowercase) w = lower(w);
    if (strip) w = strip_accents(w);
    std::string cur;
    for (uint32_t c : w) {  // punctuation characters are words of their own
      if (is_bert_punctuation(c)) {
        if (!cur.empty()) out.push_back(std::move(cur));
        cur.clear();
        std::string p;
        utf8::append(p, c);
        out.push_back(std::move(p));
      } else {
        utf8::append(cur, c);
      }
    }
    if (!cur.empty()) out.push_back(std::move(cur));
  }
  return out;
}

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::create(WordPieceVocab vocab,
                                                                       const std::string& source) {
  std::unique_ptr<WordPieceTokenizer> t(new WordPieceTokenizer(std::move(vocab)));
  HEARTH_TRY(t->build(source));
  return t;
}

Status WordPieceTokenizer::build(const std::string& source) {
  if (v_.types.empty()) v_.types.assign(v_.tokens.size(), TokenType::kNormal);
  HEARTH_TRY((check_vocab_table<WordPieceVocab, &WordPieceVocab::tokens>(v_, source)));
  if (v_.unk_id < 0)
    return Status::error(source + ": a WordPiece vocabulary needs an unknown token");
  const std::string& prefix = v_.continuation_prefix;
  for (size_t i = 0; i < v_.tokens.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string& t = v_.tokens[i];
    const TokenType type = v_.types[i];
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      special_.add(t, id);
      continue;
    }
    if (type == TokenType::kUnused) continue;
    // A text stored twice keeps its first id (tokenizer.json's vocab is a map: no repeats).
    if (v_.phantom_space) {
      if (t.compare(0, kPhantomSpace.size(), kPhantomSpace) == 0) {
        word_start_.emplace(t.substr(kPhantomSpace.size()), id);
      } else {
        continuation_.emplace(t, id);
      }
    } else if (!prefix.empty() && t.compare(0, prefix.size(), prefix) == 0 &&
               t.size() > prefix.size()) {
      continuation_.emplace(t.substr(prefix.size()), id);
    } else {
      word_start_.emplace(t, id);
    }
  }
  return Status::ok();
}

void WordPieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<size_t> offs;  // byte offset of each code point, plus the end
  for (size_t pos = 0; pos < word.size();) {
    offs.push_back(pos);
    uint32_t cp;
    const int n = utf8::decode(word, pos, &cp);
    pos += n > 0 ? n : 1;
  }
  offs.push_back(word.size());
  const size_t n_chars = offs.size() - 1;
  if (n_chars > v_.max_input_chars_per_word) {
    out.push_back(v_.unk_id);
    return;
  }
  std::vector<int32_t> pieces;
  size_t start = 0;
  while (start < n_chars) {
    const auto& table = start == 0 ? word_start_ : continuation_;
    int32_t found = -1;
    size_t end = n_chars;
    for (; end > start; --end) {
      auto it = table.find(std::string(word.substr(offs[start], offs[end] - offs[start])));
      if (it != table.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // no piece covers this position: the whole word is unknown
      out.push_back(v_.unk_id);
      return;
    }
    pieces.push_back(found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text, bool add_special,
                                                bool parse_special) const {
  static const SpecialTokenMatcher kNone;
  const SpecialTokenMatcher& m = parse_special ? special_ : kNone;
  return with_bos_eos(add_special, [&](std::vector<int32_t>& out) {
    for (const auto& frag : m.split(text)) {
      if (frag.id >= 0) {
        out.push_back(frag.id);
        continue;
      }
      for (const std::string& w : bert_pre_tokenize(frag.text, v_.lowercase, v_.strip_accents)) {
        encode_word(w, out);
      }
    }
  });
}

std::string WordPieceTokenizer::token_bytes(int32_t id) const {
  if (!in_range(id)) return "";
  const std::string& t = v_.tokens[id];
  if (v_.types[id] == TokenType::kControl) return "";
  if (v_.types[id] == TokenType::kUserDefined) return t;
  if (v_.phantom_space) {
    if (t.compare(0, kPhantomSpace.size(), kPhantomSpace) == 0)
      return " " + t.substr(kPhantomSpace.size());
    return t;
  }
  const std::string& prefix = v_.continuation_prefix;
  if (!prefix.empty() && t.compare(0, prefix.size(), prefix) == 0 && t.size() > prefix.size()) {
    return t.substr(prefix.size());
  }
  return " " + t;
}

}  // namespace hearth
