// Request bodies -> JSON objects with bounded memory: nesting depth and the number of values are
// counted in one pass over the bytes before nlohmann builds anything, so a body of a million
// '[' costs nothing but that pass. Limits grow in JsonLimits; callers get a one-line message.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace hearth::server {

struct JsonLimits {
  size_t max_depth = 64;                // the API's deepest document is ~6 levels
  size_t max_values = size_t(1) << 20;  // token-id arrays of a long prompt fit
};

// Parses `body` into *out when it is a JSON object within the limits; otherwise false with
// *error saying which of: too deep, too many values, not JSON (with the byte offset), not an
// object (with what it is).
bool parse_json_object(const std::string& body, const JsonLimits& limits, nlohmann::json* out,
                       std::string* error);

}  // namespace hearth::server
