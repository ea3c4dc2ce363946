// Tool calling on the wire (OpenAI's chat completions; Ollama's /api/chat arrives translated):
// `tools`, `tool_choice` and `parallel_tool_calls` checked and turned into the template's `tools`
// variable and, for "required" or a named function, a grammar constraint; messages' tool_calls
// and tool results checked and handed to the template; the answer's calls (parsed by
// runtime/tool-calls in the template family's syntax) written as OpenAI's and Ollama's JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/chat/chat-template.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "runtime/tool-calls/tool-call-family.h"
#include "runtime/tool-calls/tool-call-parser.h"

namespace hearth::server {

struct ApiError;
struct ApiConfig;

// What a request asked of tool calling.
struct ToolUse {
  bool parse = false;  // tools were given and tool_choice is not "none": read calls from the answer
  bool required = false;  // "required" or a named function: the call grammar constrains the output
  ToolCallFamily family = ToolCallFamily::kGeneric;
  std::vector<std::string> names;  // the declared functions
  nlohmann::json tools;            // the request's tools as the template sees them (null: none)
};

// Reads tools, tool_choice and parallel_tool_calls. With tool_choice "required" or a named
// function, sets job->generate.constraint to the family's call grammar (a 400 when the request
// also gave response_format or grammar). Errors are 400s naming the field.
bool parse_tool_request(const nlohmann::json& j, const ApiConfig& cfg, const Engine& engine,
                        Job* job, ToolUse* out, ApiError* err);

// How tool turns are shaped for a template. Published templates disagree: most apply tojson to
// a call's arguments (an object, as Hugging Face's callers pass it) but DeepSeek-R1's, functionary
// v3.2's and firefunction's concatenate them as text; Qwen3's and Phi's fail on a null content
// that Llama's accepts; Mistral's insist on 9-character alphanumeric call ids.
struct ToolTurnShape {
  bool string_arguments = false;       // arguments as JSON text, not an object
  bool null_content_as_empty = false;  // a call-only turn's null content as ""
  bool short_call_ids = false;  // ids mapped to 9 alphanumerics (the same id, the same result)
};
// The shapes to try in order, until the template renders.
std::vector<ToolTurnShape> tool_turn_shapes(const nlohmann::json& messages, ToolCallFamily family);

// A chat message's tool fields: an assistant's tool_calls (content may then be null), a tool
// result's tool_call_id (required) and name / tool_name. They become template fields of *msg.
bool message_tool_fields(const nlohmann::json& m, size_t index, const ToolTurnShape& shape,
                         ChatMessage* msg, ApiError* err);

// Template variables besides `tools` that a family's template reads: firefunction v2's
// `functions` (the function list as JSON text) and `datetime`.
void family_template_variables(const ToolUse& use,
                               std::vector<std::pair<std::string, nlohmann::json>>* vars);

// The calls in an answer's content (reasoning already split off); no calls when parse is off.
ToolCallParse answer_tool_calls(const ToolUse& use, const std::string& content);

// OpenAI's message.tool_calls: [{id: "call_...", type: "function", function: {name, arguments}}].
nlohmann::json openai_tool_calls(const std::vector<ToolCall>& calls);
// The stream's deltas for the calls: per call one chunk's tool_calls entry with index, id, type,
// name and empty arguments, then one with the arguments.
std::vector<nlohmann::json> openai_tool_call_deltas(const std::vector<ToolCall>& calls);
// Ollama's message.tool_calls: [{function: {name, arguments: {...}}}] (arguments an object).
nlohmann::json ollama_tool_calls(const std::vector<ToolCall>& calls);

}  // namespace hearth::server
