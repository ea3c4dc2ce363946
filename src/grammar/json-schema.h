// JSON Schema -> GBNF, so a schema constrains decoding like any grammar. What is supported (and
// how numbers, patterns and oneOf are handled) is in docs/structured-output.md; any other
// keyword is an error naming it and where it is, never silently ignored.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace hearth {

// The schema as JSON text. The grammar produces compact JSON (optional single spaces or
// newline indentation between tokens) whose instances all validate against the schema.
Result<std::string> json_schema_to_gbnf(std::string_view schema_json);

// Any JSON object ({"type":"json_object"} in OpenAI's response_format).
std::string json_object_gbnf();

}  // namespace hearth
