// Tool calling: which output format a chat template teaches its model for function calls, found
// from the template's own text. Each family's call syntax is parsed by tool-call-parser.h and
// produced under constraint by tool-call-grammar.h. docs/server.md lists the families.
#pragma once

#include <string_view>

namespace hearth {

enum class ToolCallFamily {
  kGeneric,      // no known markers: {"tool_calls":[{"name":..,"arguments":{..}}]} or a bare call
  kHermes,       // Hermes 2/3, Qwen2.5, Qwen3: <tool_call>{"name":..,"arguments":{..}}</tool_call>
  kLlama3,       // Llama 3.1-3.3: {"name":..,"parameters":{..}} or <|python_tag|>...
  kMistral,      // Mistral Nemo and older: [TOOL_CALLS][{"name":..,"arguments":{..}}]
  kMistralArgs,  // Mistral Small 3.2 and newer: [TOOL_CALLS]name[ARGS]{..}
  kDeepSeek,     // DeepSeek-R1 (and distills), V3: <｜tool▁calls▁begin｜>...
  kFunctionaryV31,  // functionary v3.1: <function=name>{..}</function>
  kFunctionaryV32,  // functionary v3.2: >>>name\n{..} (the prompt ends with ">>>")
  kFirefunction,    // firefunction v2:  functools[{"name":..,"arguments":{..}}]
};

// The family whose call markers the template text writes (it renders assistant tool_calls with
// them); kGeneric when it has none. Checked in an order where no family's markers hide another's:
// functionary v3.1 also has <|python_tag|>, Hermes 3 is built on Llama 3.1.
ToolCallFamily detect_tool_call_family(std::string_view template_text);

// A short name for logs and docs ("hermes", "llama3", ...).
std::string_view tool_call_family_name(ToolCallFamily family);

}  // namespace hearth
