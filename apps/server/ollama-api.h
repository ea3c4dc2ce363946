// Ollama's wire format (docs/api.md of ollama/ollama) over the same jobs as the OpenAI routes:
// /api/chat and /api/generate bodies are checked here and translated into the OpenAI request the
// OpenAI parser already validates (prompt rendering, special-token policy, limits and context
// checks stay in one place); Ollama-only fields (repeat_penalty, num_predict -1/-2, raw, context,
// truncate, dimensions) are applied after. Responses: NDJSON chunks and the final object with
// Ollama's counters, /api/tags, /api/show, /api/ps, /api/version, /api/embed(dings).
// A new Ollama field: a row in the field tables of ollama-api.cpp (fields not implemented are a
// 400 naming them, never ignored).
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "openai-api.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"

namespace hearth::server {

// Ollama's error answer: HTTP status + {"error": "message"} (the message names the field).
struct OllamaError {
  int status = 400;
  std::string message;
};
json ollama_error_body(const OllamaError& e);

// A parsed /api/chat or /api/generate request.
struct OllamaGenerate {
  bool chat = false;
  bool stream = true;  // Ollama streams unless told not to
  // An empty prompt (generate) or no messages (chat) only loads the model in Ollama: the answer
  // is a final object with done_reason "load" and no job.
  bool load_only = false;
  // `think`: true splits a think block into message.thinking (chat) or thinking (generate).
  bool think = false;
  bool reasoning_starts_inside = false;  // the prompt ends with "<think>"
  ToolUse tools;                         // chat: calls in the answer become message.tool_calls
  std::shared_ptr<Job> job;
};

std::optional<OllamaGenerate> parse_ollama_generate(const ApiConfig& cfg, const Engine& engine,
                                                    const std::string& body, bool chat,
                                                    OllamaError* err);

// A parsed /api/embed (legacy=false) or /api/embeddings (legacy=true) request.
struct OllamaEmbed {
  bool legacy = false;
  int64_t dimensions = 0;  // 0: the model's width; else truncate and renormalize
  std::shared_ptr<Job> job;
};
std::optional<OllamaEmbed> parse_ollama_embed(const ApiConfig& cfg, const Engine& engine,
                                              const std::string& body, bool legacy,
                                              OllamaError* err);

// The `model` a /api/show body names (required, as in Ollama; "name" is its old spelling).
bool parse_ollama_show(const ApiConfig& cfg, const std::string& body, OllamaError* err);

// "2024-05-01T12:34:56.123456789Z" for a system-clock time (Ollama's created_at).
std::string ollama_time(std::chrono::system_clock::time_point t);

// A streamed piece of output (done: false), with its thinking when the request asked for it and
// (chat) the tool calls parsed from the answer.
json ollama_chunk(const ApiConfig& cfg, bool chat, const std::string& text,
                  const std::string& thinking = "", const std::vector<ToolCall>& calls = {});
// The last object: done_reason, durations (ns), counts and, for generate, `context` (the prompt
// and generated token ids a client sends back to continue). `text` is the whole answer when not
// streamed (split into thinking when req.think), "" when streamed. `received` is when the request
// arrived.
json ollama_final(const ApiConfig& cfg, const OllamaGenerate& req, const std::string& text,
                  std::chrono::steady_clock::time_point received);
json ollama_embed_response(const ApiConfig& cfg, const OllamaEmbed& req,
                           std::chrono::steady_clock::time_point received);

json ollama_tags(const ApiConfig& cfg, const Engine& engine);
json ollama_ps(const ApiConfig& cfg, const Engine& engine);
json ollama_show(const ApiConfig& cfg, const Engine& engine);
json ollama_version();

}  // namespace hearth::server
