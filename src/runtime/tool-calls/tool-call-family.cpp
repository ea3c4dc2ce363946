// tool-call-family.h: each family is recognised by a marker its template writes when it renders
// an assistant message's tool_calls (or, for Llama 3, the ipython role its tool results use).
#include "runtime/tool-calls/tool-call-family.h"

namespace hearth {

ToolCallFamily detect_tool_call_family(std::string_view t) {
  auto has = [&](std::string_view marker) { return t.find(marker) != std::string_view::npos; };
  if (has("<tool_call>")) return ToolCallFamily::kHermes;
  if (has("[TOOL_CALLS]"))
    return has("[ARGS]") ? ToolCallFamily::kMistralArgs : ToolCallFamily::kMistral;
  if (has("tool\xE2\x96\x81"
          "calls\xE2\x96\x81"
          "begin"))
    return ToolCallFamily::kDeepSeek;
  if (has("functools[")) return ToolCallFamily::kFirefunction;
  if (has("<function=")) return ToolCallFamily::kFunctionaryV31;
  if (has("'>>>'") || has("\">>>\"") || has(">>>all")) return ToolCallFamily::kFunctionaryV32;
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("ipython")))
    return ToolCallFamily::kLlama3;
  return ToolCallFamily::kGeneric;
}

std::string_view tool_call_family_name(ToolCallFamily family) {
  switch (family) {
    case ToolCallFamily::kGeneric:
      return "generic";
    case ToolCallFamily::kHermes:
      return "hermes";
    case ToolCallFamily::kLlama3:
      return "llama3";
    case ToolCallFamily::kMistral:
      return "mistral";
    case ToolCallFamily::kMistralArgs:
      return "mistral-args";
    case ToolCallFamily::kDeepSeek:
      return "deepseek";
    case ToolCallFamily::kFunctionaryV31:
      return "functionary-v3.1";
    case ToolCallFamily::kFunctionaryV32:
      return "functionary-v3.2";
    case ToolCallFamily::kFirefunction:
      return "firefunction";
  }
  return "generic";
}

}  // namespace hearth
