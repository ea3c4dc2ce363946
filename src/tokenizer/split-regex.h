// The regex dialect of tokenizer pre-tokenizer patterns (Hugging Face's Oniguruma, Ruby syntax),
// compiled to a small backtracking program over code points. Add a construct: its parse in
// split-regex-parse.cpp and, when it needs one, an instruction in split-regex.cpp.
//
// Supported: literals and escapes (\r \n \t \f \v \\ \. ... \uXXXX \x{...}), `.`, classes with
// ranges and negation, \s \S \d \D \w \W \p{..} \P{..} (general categories such as L, Lu, M, N,
// P, S and scripts such as Han), alternation, (...), (?:...), (?i:...), (?i), (?=...), (?!...),
// (?>...), greedy / lazy / possessive ? * + {n} {n,} {n,m}, ^ $ (line anchors, as in Ruby) and
// \b \B. Look-behind and back-references are refused with an error naming them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace hearth {

// A code point sequence with the byte offset of each code point (invalid UTF-8 bytes are one
// code point each, kInvalidCodePoint, that no class but a negated one matches).
inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFF;
struct CodePoints {
  std::vector<uint32_t> cp;
  std::vector<size_t> offset;  // byte offset of each code point, plus the end
  static CodePoints from_utf8(std::string_view text);
  size_t size() const { return cp.size(); }
};

namespace split_regex {

// A set of code points: ranges and character properties, possibly negated.
struct Property {
  enum Kind : uint8_t { kCategoryMask, kScript, kWhiteSpace, kWord } kind;
  uint32_t value = 0;  // ICU general-category mask or UScriptCode
  bool negated = false;
};
struct CharSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  std::vector<Property> properties;
  bool negated = false;
  bool ignore_case = false;
  bool contains(uint32_t cp) const;
};

enum class Op : uint8_t {
  kSet,        // a code point in sets[arg]
  kSplit,      // try x, on failure y
  kJump,       // continue at x
  kLookahead,  // sub-program at x must (arg=0) / must not (arg=1) match here
  kAtomic,     // sub-program at x, first match only, then continue at y
  kLineStart,  // ^
  kLineEnd,    // $
  kWordEdge,   // \b (arg=0) or \B (arg=1)
  kMatch,
};
struct Inst {
  Op op;
  uint32_t arg = 0;
  uint32_t x = 0, y = 0;
};
struct Program {
  std::vector<Inst> code;
  std::vector<CharSet> sets;
};

Result<Program> parse_and_compile(std::string_view pattern);

}  // namespace split_regex

class SplitRegex {
 public:
  // An error names the construct and its byte offset in the pattern.
  static Result<SplitRegex> compile(std::string_view pattern);

  // The length in code points of the match starting at `pos` (first alternative that succeeds,
  // as a backtracking engine finds it), or -1 when none starts there.
  int64_t match_at(const CodePoints& text, size_t pos) const;
  const std::string& pattern() const { return pattern_; }

 private:
  SplitRegex(std::string pattern, split_regex::Program program)
      : pattern_(std::move(pattern)),
        program_(std::make_shared<split_regex::Program>(std::move(program))) {}
  int64_t run(uint32_t pc, const CodePoints& text, size_t pos, uint64_t& budget) const;

  std::string pattern_;
  std::shared_ptr<const split_regex::Program> program_;
};

}  // namespace hearth
