// Builds a Grammar rule by rule (what the GBNF parser calls as it reads), then checks it and
// flattens it. Repetition x{m,n} becomes helper rules here, so the matcher knows only sequences,
// alternatives and rule references.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/utf8-ranges.h"

namespace hearth {

class GrammarBuilder {
 public:
  struct Symbol {
    bool is_rule = false;
    uint32_t id = 0;  // rule id or byte-set id
  };
  using Sequence = std::vector<Symbol>;
  static constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

  explicit GrammarBuilder(const GrammarLimits& limits) : limits_(limits) {}

  uint32_t rule_id(const std::string& name);          // creates an undefined rule on first use
  uint32_t new_helper_rule(const std::string& base);  // "base_N", defined by the caller
  bool is_defined(uint32_t rule) const { return defined_[rule]; }
  const std::string& name(uint32_t rule) const { return names_[rule]; }
  void define(uint32_t rule, std::vector<Sequence> alternatives);

  // The UTF-8 bytes of a literal, one element per byte.
  void append_literal(const std::vector<uint8_t>& bytes, Sequence* seq);
  // One code point from the (normalized) ranges; error when they are empty.
  Status append_class(const std::vector<CodepointRange>& ranges, Sequence* seq);
  // Replaces seq[start..] (the last symbol, maybe several elements) by its repetition {m,n}.
  Status apply_repetition(Sequence* seq, size_t start, uint32_t min, uint32_t max);
  // A rule reference to a group of alternatives ( ... ).
  Symbol group(std::vector<Sequence> alternatives);

  // Checks (defined, root present, every reachable rule can finish, no left recursion) and
  // flattens. The builder is spent afterwards.
  Result<Grammar> finish(const std::string& root_name);

 private:
  uint32_t byte_set_id(const ByteSet& set);
  Status count(size_t n);

  GrammarLimits limits_;
  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<bool> defined_;
  std::map<std::string, uint32_t> ids_;
  std::vector<ByteSet> sets_;
  std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
  std::map<std::vector<ByteRangeSequence>, uint32_t> class_rules_;  // one helper per class
  size_t symbols_ = 0;
};

}  // namespace hearth
