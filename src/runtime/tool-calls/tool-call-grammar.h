// tool_choice "required" or a named function: a GBNF grammar that admits only calls in the
// template family's own syntax (tool-call-family.h), of the given functions, whose arguments
// satisfy each function's JSON Schema. The result goes through compile_output_format (kGbnf) like
// any grammar, so the one matcher enforces it token by token.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/tool-calls/tool-call-family.h"

namespace hearth {

struct ToolFunction {
  std::string name;        // [A-Za-z0-9_-]{1,64}, checked by the caller
  std::string parameters;  // JSON Schema text of the arguments object ("" -> any object)
};

struct ToolCallGrammarOptions {
  ToolCallFamily family = ToolCallFamily::kGeneric;
  bool parallel = true;  // false: exactly one call. Llama 3's format is always one call.
};

// The grammar text. An error names the function by index ("tools[2]: JSON Schema: ...") when its
// parameters use something the schema converter does not support.
Result<std::string> tool_call_gbnf(const std::vector<ToolFunction>& functions,
                                   const ToolCallGrammarOptions& options);

// Every rule name in a GBNF text with `prefix` in front, so that several grammars (one per
// function's schema) can live in one file. Strings, character classes, repetition counts and
// comments are left as they are.
std::string prefix_gbnf_rules(const std::string& gbnf, const std::string& prefix);

}  // namespace hearth
