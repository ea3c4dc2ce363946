// A compiled grammar: every rule's alternatives flattened into one array of elements over bytes.
// parse_gbnf() builds it from llama.cpp's GBNF syntax; GrammarMatcher runs it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace hearth {

// A set of bytes (256 bits): one element of a sequence matches one byte in the set.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(uint8_t(b));
  }
  bool operator==(const ByteSet&) const = default;
};

struct GrammarElement {
  enum class Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = Kind::kEnd;
  uint32_t arg = 0;  // kBytes: index into byte_sets; kRule: rule id
};

// Code points are compiled to their UTF-8 bytes (a class beyond ASCII becomes alternatives of
// byte-range sequences), so the matcher only ever sees bytes and partial characters in a token
// (byte-fallback pieces) need no special case. Only valid UTF-8 can match.
struct Grammar {
  std::vector<GrammarElement> elements;             // each alternative ends with a kEnd
  std::vector<std::vector<uint32_t>> alternatives;  // rule id -> first element of each alternative
  std::vector<std::string> rule_names;              // generated helper rules: "name_3" etc.
  std::vector<ByteSet> byte_sets;
  uint32_t root = 0;
};

// Limits that keep a hostile grammar from exhausting memory.
struct GrammarLimits {
  uint32_t max_repetition = 10000;  // the m and n of x{m,n}
  uint32_t max_elements = 4u << 20;
  uint32_t max_nesting = 200;  // ( ) groups inside each other (the parser recurses into each)
};

// Parses GBNF (rules `name ::= ...`, `|`, `( )`, `* + ? {m} {m,} {m,n}`, "literals", [classes]
// with ranges and `^`, `.`, escapes \x \u \U \t \n \r \\ \" \[ \] \- \^, `#` comments). The
// grammar starts at `root`. Rejects undefined rules, left recursion and rules that can never
// finish, with a message naming the line or the rule.
Result<Grammar> parse_gbnf(std::string_view text, const GrammarLimits& limits = {});

}  // namespace hearth
