// The OpenAI wire format: request bodies -> validated jobs (with field limits and context
// checks), and jobs -> response / stream-chunk JSON, plus the error shape. A new request field is
// parsed in parse_common(); a new endpoint gets its own parse_* here and a route in http-server.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "json-body.h"
#include "runtime/chat-tokenize.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "tool-calls-api.h"

namespace hearth::server {

using json = nlohmann::json;

// An error as the API reports it: HTTP status + {"error": {message, type, param, code}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
  // Set when the local model cannot take the request but a remote one might (fallback).
  std::string fallback_reason;
};
json error_body(const ApiError& e);
// Fills *err as a 400 invalid_request_error naming `param`; returns false (the parsers'
// `return invalid_request(...)`).
bool invalid_request(ApiError* err, const std::string& param, const std::string& message,
                     const std::string& code = "");

// Serializes a response document. Request bytes reach messages (paths, field values) and may be
// invalid UTF-8, which nlohmann's plain dump() throws on: they become U+FFFD instead.
std::string json_text(const json& j);

struct ApiLimits {
  size_t max_messages = 1024;
  size_t max_string_bytes = 1 << 20;  // any one string field
  size_t max_stop = 8;                // stop strings
  size_t max_stop_bytes = 256;        // each
  size_t max_embedding_inputs = 256;
  size_t max_logit_bias = 1024;  // logit_bias entries
};

// Server-wide settings the parser needs.
struct ApiConfig {
  std::string model_id;
  int64_t ctx_size = 0;
  int slots = 0;              // the scheduler's slots: the most choices (`n`) a request may ask for
  SamplingParams defaults;    // from the command line; request fields override them
  std::string chat_template;  // "" -> /v1/chat/completions answers 400
  std::vector<std::string> chat_stops;  // end-of-turn texts of the template's family
  ApiLimits limits;
  JsonLimits json_limits;
  // Trusted clients only: special-token texts in message content ("</s>") become control tokens.
  // Off, content is text and only the template's own text yields control tokens.
  bool special_tokens_in_content = false;
  // The engine's special-token index for chat prompts (Server::start builds it when null).
  std::shared_ptr<const ChatTokenizer> chat_tokenizer;
};

// A parsed completion or chat request ready for the scheduler.
struct CompletionRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  // Chat: split <think> blocks into reasoning_content (reasoning_format "auto", the default).
  bool split_reasoning = false;
  // The prompt ends with "<think>": the output starts inside the reasoning.
  bool reasoning_starts_inside = false;
  // Chat: the request's tools; with parse set, calls in the answer become tool_calls.
  ToolUse tools;
  std::shared_ptr<Job> job;  // the first choice (choices[0]): the request's fields live here
  std::vector<std::shared_ptr<Job>> choices;  // one job per choice (`n`), index order
};

// Parses a /v1/chat/completions (chat=true) or /v1/completions body. On error returns nullopt
// and fills *err (status 400 for bad input, with fallback_reason when the prompt is too long).
std::optional<CompletionRequest> parse_completion(const ApiConfig& cfg, const Engine& engine,
                                                  const std::string& body, bool chat,
                                                  ApiError* err);

// Parses /v1/embeddings. Also returns whether the client asked for base64 output.
std::shared_ptr<Job> parse_embeddings(const ApiConfig& cfg, const Engine& engine,
                                      const std::string& body, bool* base64, ApiError* err);

// Response documents.
std::string new_request_id(const char* prefix);
// texts[i] is choice i's answer.
json completion_response(const CompletionRequest& req, const ApiConfig& cfg, const std::string& id,
                         int64_t created, const std::vector<std::string>& texts);
// One SSE chunk of choice `index`: a text (and, chat, reasoning_content or tool_calls) delta
// (finish_reason null) or the last chunk (finish_reason set), with the logprobs of the delta's
// tokens when asked for (null otherwise).
json completion_chunk(const CompletionRequest& req, const ApiConfig& cfg, const std::string& id,
                      int64_t created, const std::string& text, const char* finish_reason,
                      bool first, const json& logprobs = nullptr, const std::string& reasoning = "",
                      const json& tool_calls = nullptr, size_t index = 0);
// A stream chunk's `logprobs` for the tokens it carries: null when the request did not ask or
// there are none; *text_offset carries the completions' text_offset across chunks.
json stream_logprobs(const CompletionRequest& req, const std::vector<TokenLogprob>& tokens,
                     size_t* text_offset);
// The prompt counts once, the completion tokens of every choice add up.
json usage_json(const CompletionRequest& req);
json usage_chunk(const CompletionRequest& req, const ApiConfig& cfg, const std::string& id,
                 int64_t created);
json embeddings_response(const Job& job, const ApiConfig& cfg, bool base64);
json models_response(const ApiConfig& cfg, int64_t created);

// The finish_reason OpenAI clients know, for a job's internal reason.
const char* api_finish_reason(const Job& job);

// A chat answer taken apart: reasoning (when split), the calls (when tools are parsed) and the
// content left.
struct ChatAnswer {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
};
ChatAnswer chat_answer(const CompletionRequest& req, const std::string& text);

}  // namespace hearth::server
