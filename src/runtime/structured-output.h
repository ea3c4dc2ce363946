// Structured output for a generation: a GBNF grammar, a JSON Schema or "any JSON object", made
// into the TokenConstraint that GenerateOptions::constraint carries. The CLI, the C API and the
// server's response_format / grammar fields all come through here.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "grammar/grammar.h"
#include "runtime/engine.h"
#include "sampling/token-constraint.h"

namespace hearth {

struct OutputFormat {
  enum class Kind { kText, kGbnf, kJsonSchema, kJsonObject };
  Kind kind = Kind::kText;
  std::string text;  // the GBNF grammar or the JSON Schema (JSON text)
};

// The grammar of a format (errors name the grammar line or the schema keyword and path).
// Compile once and reuse: the result is immutable and may be shared across threads.
Result<std::shared_ptr<const Grammar>> compile_output_format(const OutputFormat& format);

// A fresh constraint (one per generation) over the engine's vocabulary.
std::shared_ptr<TokenConstraint> make_constraint(const Engine& engine,
                                                 std::shared_ptr<const Grammar> grammar);

}  // namespace hearth
