// Pieces of the JSON Schema converter that build GBNF text for JSON scalars: JSON-encoded
// characters and literals, string formats, ECMAScript patterns, integer and number ranges.
// Internal to src/grammar (json-schema.cpp is the one user).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/utf8-ranges.h"

namespace hearth::schema {

// GBNF literal ("...") for raw bytes, every byte outside printable ASCII escaped.
std::string gbnf_literal(std::string_view bytes);
// GBNF expression matching one JSON string character whose decoded code point lies in `ranges`
// (normalized): raw where JSON allows it, \" \\ and \u00XX forms for the rest.
std::string json_char(const std::vector<CodepointRange>& ranges);
// One character of any JSON string (raw or any escape, no lone surrogates).
std::string json_any_char();

// "date", "time", "date-time", "uuid": a GBNF expression for the whole quoted string.
Result<std::string> string_format(const std::string& format);
// An ECMAScript pattern (the subset in docs/structured-output.md) as a GBNF expression for the
// string's content (without quotes).
Result<std::string> pattern_to_gbnf(const std::string& pattern);

// Bounds as the schema gave them (inclusive or exclusive, absent = unbounded).
struct NumericBounds {
  std::optional<double> min, max;
  bool min_exclusive = false, max_exclusive = false;
};
// Integers in the bounds (within +-(10^15 - 1)), as GBNF. Error when none.
Result<std::string> integer_range(const NumericBounds& b);
// Numbers in the bounds: the integers plus decimals of 1-15 fraction digits whose whole part
// keeps every value inside (documented). Error when that leaves nothing.
Result<std::string> number_range(const NumericBounds& b);

}  // namespace hearth::schema
