// The Ollama endpoints of `hearth serve` (/api/chat, /api/generate, /api/embed, /api/embeddings,
// /api/show, /api/tags, /api/ps, /api/version) on the scheduler the OpenAI routes use. Requests
// reach them through Server::Impl::route() after the same admission (Host, Origin, API key),
// drain and JSON-body checks as every API route; answers are Ollama's documents, streams NDJSON.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "http-message.h"
#include "openai-api.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"

namespace hearth::server {

// What the routes share with the server: the model, settings, scheduler and counters.
struct OllamaContext {
  const Engine* engine = nullptr;
  const ApiConfig* api = nullptr;
  Scheduler* scheduler = nullptr;
  std::atomic<int>* in_flight = nullptr;
  std::atomic<int64_t>* bad_requests = nullptr;
  std::atomic<int64_t>* rejected_queue_full = nullptr;
};

enum class OllamaMethod { kNone, kGet, kPost };
// Which method a path of the Ollama API takes (kNone: not an Ollama path).
OllamaMethod ollama_method(const std::string& path);

class OllamaRoutes {
 public:
  explicit OllamaRoutes(OllamaContext context) : c_(context) {}
  // GET routes (tags, ps, version).
  HttpResponse get(const std::string& path) const;
  // POST routes; answers on `ex` now or when the job finishes.
  void post(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex) const;

 private:
  void generate(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex, bool chat) const;
  void embed(const HttpRequest& req, const std::shared_ptr<HttpExchange>& ex, bool legacy) const;
  bool submit(const std::shared_ptr<Job>& job, const std::shared_ptr<HttpExchange>& ex) const;
  OllamaContext c_;
};

}  // namespace hearth::server
