// parse_json_object: a structural pre-scan (strings and escapes skipped, brackets and separators
// counted), then nlohmann's parser for everything else it checks.
#include "json-body.h"

namespace hearth::server {

namespace {
// Deepest nesting and a count of values (each bracket and separator starts at most one).
void scan(const std::string& s, size_t* max_depth, size_t* values, size_t depth_cap) {
  size_t depth = 0, deepest = 0, count = 1;
  bool in_string = false, escaped = false;
  for (const char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        ++count;
        if (++depth > deepest) deepest = depth;
        if (deepest > depth_cap) {
          *max_depth = deepest;
          *values = count;
          return;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      case ',':
      case ':':
        ++count;
        break;
      default:
        break;
    }
  }
  *max_depth = deepest;
  *values = count;
}

const char* kind_of(const nlohmann::json& j) {
  if (j.is_array()) return "an array";
  if (j.is_string()) return "a string";
  if (j.is_number()) return "a number";
  if (j.is_boolean()) return "a boolean";
  return "null";
}
}  // namespace

bool parse_json_object(const std::string& body, const JsonLimits& limits, nlohmann::json* out,
                       std::string* error) {
  size_t depth = 0, values = 0;
  scan(body, &depth, &values, limits.max_depth);
  if (depth > limits.max_depth) {
    *error =
        "the request body nests JSON deeper than " + std::to_string(limits.max_depth) + " levels";
    return false;
  }
  if (values > limits.max_values) {
    *error = "the request body has more than " + std::to_string(limits.max_values) + " JSON values";
    return false;
  }
  try {
    *out = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    *error = "the request body is not valid JSON (at byte " + std::to_string(e.byte) + ")";
    return false;
  } catch (const nlohmann::json::out_of_range&) {
    // A number past double's range (1E400) is a client's error too, not the server's 500.
    *error = "the request body holds a number out of range";
    return false;
  }
  if (!out->is_object()) {
    *error = std::string("the request body must be a JSON object, not ") + kind_of(*out);
    return false;
  }
  return true;
}

}  // namespace hearth::server
