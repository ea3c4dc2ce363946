// The backtracking matcher of split-regex.h: an explicit stack of (instruction, position)
// choices, so the leftmost alternative that succeeds wins, as in Oniguruma. Look-aheads and
// atomic groups run their sub-program as a separate match.
#include "tokenizer/split-regex.h"

#include <unicode/uchar.h>
#include <unicode/uscript.h>

#include "base/printable.h"
#include "tokenizer/utf8.h"

namespace hearth {

CodePoints CodePoints::from_utf8(std::string_view text) {
  CodePoints c;
  c.cp.reserve(text.size());
  c.offset.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp;
    const int len = utf8::decode(text, pos, &cp);
    c.cp.push_back(len > 0 ? cp : kInvalidCodePoint);
    c.offset.push_back(pos);
    pos += len > 0 ? len : 1;
  }
  c.offset.push_back(text.size());
  return c;
}

namespace split_regex {
namespace {

bool is_word(uint32_t cp) {  // Oniguruma's Unicode \w: letters, marks, decimal digits, _ and co.
  constexpr uint32_t kWordMask = U_GC_L_MASK | U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK;
  return cp <= 0x10FFFF && (U_GET_GC_MASK(static_cast<UChar32>(cp)) & kWordMask) != 0;
}

bool has_property(const Property& p, uint32_t cp) {
  bool in = false;
  if (cp <= 0x10FFFF) {
    const auto c = static_cast<UChar32>(cp);
    switch (p.kind) {
      case Property::kCategoryMask:
        in = (U_GET_GC_MASK(c) & p.value) != 0;
        break;
      case Property::kScript: {
        UErrorCode err = U_ZERO_ERROR;
        in = static_cast<uint32_t>(uscript_getScript(c, &err)) == p.value && U_SUCCESS(err);
        break;
      }
      case Property::kWhiteSpace:
        in = utf8::is_whitespace(cp);
        break;
      case Property::kWord:
        in = is_word(cp);
        break;
    }
  }
  return in != p.negated;
}

bool raw_contains(const CharSet& s, uint32_t cp) {
  for (auto [lo, hi] : s.ranges) {
    if (cp >= lo && cp <= hi) return true;
  }
  for (const Property& p : s.properties) {
    if (has_property(p, cp)) return true;
  }
  return false;
}

}  // namespace

bool CharSet::contains(uint32_t cp) const {
  bool in = raw_contains(*this, cp);
  if (!in && ignore_case && cp <= 0x10FFFF) {
    const auto c = static_cast<UChar32>(cp);
    for (UChar32 v :
         {u_foldCase(c, U_FOLD_CASE_DEFAULT), u_tolower(c), u_toupper(c), u_totitle(c)}) {
      if (v != c && raw_contains(*this, static_cast<uint32_t>(v))) {
        in = true;
        break;
      }
    }
  }
  return in != negated;
}

}  // namespace split_regex

using split_regex::Op;

Result<SplitRegex> SplitRegex::compile(std::string_view pattern) {
  auto prog = split_regex::parse_and_compile(pattern);
  if (!prog.is_ok()) {
    // The pattern comes from the model's files: quoted as one line, whatever it holds.
    return Status::error(
        printable(prog.message() + " in pre-tokenizer pattern \"" + std::string(pattern) + "\""));
  }
  return SplitRegex(std::string(pattern), std::move(prog).value());
}

int64_t SplitRegex::match_at(const CodePoints& text, size_t pos) const {
  // A step budget bounds pathological backtracking on hostile patterns; the published ones
  // need a few steps per code point.
  uint64_t budget = 64 * (text.size() + 64) * (program_->code.size() + 8);
  const int64_t end = run(0, text, pos, budget);
  return end < 0 ? -1 : end - static_cast<int64_t>(pos);
}

int64_t SplitRegex::run(uint32_t pc, const CodePoints& text, size_t pos, uint64_t& budget) const {
  const auto& code = program_->code;
  struct Choice {
    uint32_t pc;
    size_t pos;
  };
  std::vector<Choice> stack;
  const size_t n = text.size();
  auto word_at = [&](size_t i) { return i < n && split_regex::is_word(text.cp[i]); };
  while (true) {
    bool ok = true;
    if (budget == 0) return -1;
    --budget;
    const split_regex::Inst& in = code[pc];
    switch (in.op) {
      case Op::kSet:
        ok = pos < n && program_->sets[in.arg].contains(text.cp[pos]);
        ++pos, ++pc;
        break;
      case Op::kSplit:
        stack.push_back({in.y, pos});
        pc = in.x;
        break;
      case Op::kJump:
        pc = in.x;
        break;
      case Op::kLookahead: {
        const bool found = run(in.x, text, pos, budget) >= 0;
        ok = found != (in.arg == 1);
        pc = in.y;
        break;
      }
      case Op::kAtomic: {
        const int64_t end = run(in.x, text, pos, budget);
        ok = end >= 0;
        if (ok) pos = static_cast<size_t>(end);
        pc = in.y;
        break;
      }
      case Op::kLineStart:
        ok = pos == 0 || text.cp[pos - 1] == '\n';
        ++pc;
        break;
      case Op::kLineEnd:
        ok = pos == n || text.cp[pos] == '\n';
        ++pc;
        break;
      case Op::kWordEdge: {
        const bool edge = word_at(pos) != (pos > 0 && word_at(pos - 1));
        ok = edge != (in.arg == 1);
        ++pc;
        break;
      }
      case Op::kMatch:
        return static_cast<int64_t>(pos);
    }
    if (!ok) {
      if (stack.empty()) return -1;
      pc = stack.back().pc;
      pos = stack.back().pos;
      stack.pop_back();
    }
  }
}

}  // namespace hearth
