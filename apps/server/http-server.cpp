// Routes and policies of `hearth serve` over the Asio connection layer (http-connection.cpp):
// admission checks before routing, the OpenAI endpoints (answers and SSE streams driven by the
// scheduler's notifications, no thread per client), metrics, drain.
// New endpoints: add a row in route(); checks every request passes belong in admit().
#include <atomic>
#include <cstring>
#include <ctime>
#include <optional>
#include <sstream>
#include <thread>

#include "chat-page.h"
#include "fallback.h"
#include "http-connection.h"
#include "http-policy.h"
#include "in-flight.h"
#include "ollama-routes.h"
#include "runtime/reasoning-split.h"
#include "server.h"

namespace hearth::server {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

namespace {

HttpResponse json_response(int status, const json& j) {
  return json_http_response(status, json_text(j));
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r = json_response(e.status, error_body(e));
  if (e.status == 503) r.set_header("Retry-After", "1");
  return r;
}

ApiError make_error(int status, const std::string& message, const std::string& type,
                    const std::string& code) {
  ApiError e;
  e.status = status;
  e.message = message;
  e.type = type;
  e.code = code;
  return e;
}

// Compares secrets without an early exit, so timing does not reveal the matching prefix.
bool equal_constant_time(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(b[i]));
  return diff == 0;
}

std::string sse(const json& j) {
  return "data: " + json_text(j) + "\n\n";
}

}  // namespace

struct Server::Impl {
  std::shared_ptr<const Engine> engine;
  ServerOptions opt;
  Scheduler sched;
  OriginPolicy policy;
  std::unique_ptr<HttpListener> http;
  std::unique_ptr<Fallback> fallback;
  std::atomic<int> in_flight{0};
  std::atomic<bool> draining{false};
  std::atomic<int64_t> rejected_queue_full{0}, forwarded{0}, bad_requests{0}, refused{0};
  int64_t created = std::time(nullptr);
  OllamaRoutes ollama{
      {engine.get(), &opt.api, &sched, &in_flight, &bad_requests, &rejected_queue_full}};

  Impl(std::shared_ptr<const Engine> e, ServerOptions o)
      : engine(std::move(e)), opt(std::move(o)), sched(engine, opt.scheduler) {}

  using Ex = std::shared_ptr<HttpExchange>;

  // Every request: Host (DNS rebinding), Origin (pages of other sites), CORS preflight, API
  // key. Returns false when it answered already.
  bool admit(const HttpRequest& req, Ex* ex) {
    auto refuse = [&](int status, const std::string& msg, const char* code) {
      refused++;
      (*ex)->send(error_response(make_error(status, msg, "invalid_request_error", code)));
      return false;
    };
    // A page on evil.example that resolves to 127.0.0.1 still sends its own name as Host.
    if (!host_allowed(policy, req))
      return refuse(403,
                    "the Host header is not a name this server answers to (add it with "
                    "--allowed-host)",
                    "invalid_host");
    switch (check_origin(policy, req)) {
      case OriginVerdict::kForeign:
        return refuse(403, "cross-origin requests are refused (allow an origin with --cors-origin)",
                      "invalid_origin");
      case OriginVerdict::kCorsAllowed: {
        const std::string o = req.header_value("origin");
        // The allowed value is our own configuration's text, never the request's bytes.
        std::string value = "*";
        for (const auto& c : policy.cors_origins)
          if (c != "*" && c.size() == o.size() && strncasecmp(c.c_str(), o.c_str(), c.size()) == 0)
            value = c;
        *ex = with_cors(*ex, value);
        if (is_preflight(req)) {
          (*ex)->send(preflight_response(req));
          return false;
        }
        break;
      }
      default:
        break;
    }
    const bool open_path = req.path == "/" || req.path == "/health";
    if (!opt.api_key.empty() && !open_path && req.method != "OPTIONS") {
      const std::string auth = req.header_value("authorization");
      const std::string prefix = "Bearer ";
      if (auth.rfind(prefix, 0) != 0 ||
          !equal_constant_time(auth.substr(prefix.size()), opt.api_key)) {
        return refuse(401,
                      auth.empty() ? "Missing API key: send 'Authorization: Bearer KEY'"
                                   : "Incorrect API key provided",
                      "invalid_api_key");
      }
    }
    return true;
  }

  void handle(HttpRequest req, Ex ex) {
    try {
      if (!admit(req, &ex)) return;
      route(req, ex);
    } catch (...) {
      // Whatever a handler throws is a 500 in the API's shape, never a terminated process;
      // the exception's text stays in the server (it may echo request bytes).
      bad_requests++;
      ex->send(error_response(make_error(500, "the server failed to answer this request",
                                         "server_error", "internal_error")));
    }
  }

  void route(const HttpRequest& req, const Ex& ex) {
    const std::string& p = req.path;
    const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
    const OllamaMethod ollama_route = ollama_method(p);
    const bool is_get_route = p == "/" || p == "/health" || p == "/metrics" || p == "/v1/models" ||
                              ollama_route == OllamaMethod::kGet;
    const bool is_post_route = p == "/v1/chat/completions" || p == "/v1/completions" ||
                               p == "/v1/embeddings" || ollama_route == OllamaMethod::kPost;
    if (req.method == "OPTIONS" && (is_get_route || is_post_route)) {
      HttpResponse r;
      r.status = 204;
      r.set_header("Allow", is_get_route ? "GET, HEAD, OPTIONS" : "POST, OPTIONS");
      return ex->send(std::move(r));
    }
    if ((is_get_route && !get) || (is_post_route && !post)) {
      HttpResponse r =
          error_response(make_error(405, "Method " + req.method + " is not allowed for " + p,
                                    "invalid_request_error", "method_not_allowed"));
      r.set_header("Allow", is_get_route ? "GET, HEAD, OPTIONS" : "POST, OPTIONS");
      return ex->send(std::move(r));
    }
    if (is_get_route)
      return ex->send(ollama_route == OllamaMethod::kGet ? ollama.get(p) : get_route(p));
    if (!is_post_route) {
      bad_requests++;
      return ex->send(error_response(make_error(404, "Unknown request URL: " + req.method + " " + p,
                                                "invalid_request_error", "unknown_url")));
    }
    if (draining.load()) {
      HttpResponse r = error_response(
          make_error(503, "the server is shutting down", "server_error", "server_shutting_down"));
      r.close = true;
      return ex->send(std::move(r));
    }
    // A form or text/plain body needs no CORS preflight, so only JSON is taken (defence in
    // depth behind the Origin check).
    if (!is_json_content_type(req.header_value("content-type"))) {
      bad_requests++;
      return ex->send(
          error_response(make_error(415, "API requests must have 'Content-Type: application/json'",
                                    "invalid_request_error", "unsupported_media_type")));
    }
    if (ollama_route == OllamaMethod::kPost) return ollama.post(req, ex);
    if (p == "/v1/embeddings") return embeddings(req, ex);
    completions(req, ex, p == "/v1/chat/completions");
  }

  HttpResponse get_route(const std::string& p) {
    if (p == "/") {
      HttpResponse r;
      r.content_type = "text/html; charset=utf-8";
      r.body.assign(kChatPage, kChatPageSize);
      r.set_header("Content-Security-Policy",
                   "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'");
      r.set_header("X-Content-Type-Options", "nosniff");
      return r;
    }
    if (p == "/health") {
      const SchedulerStats s = sched.stats();
      json j = {{"status", draining.load() ? "draining" : "ok"},
                {"model", opt.api.model_id},
                {"slots_busy", s.slots_busy},
                {"slots_total", s.slots_total},
                {"queue_depth", s.queue_depth}};
      return json_response(draining.load() ? 503 : 200, j);
    }
    if (p == "/metrics") {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = metrics();
      return r;
    }
    return json_response(200, models_response(opt.api, created));
  }

  ApiError job_error(const Job& job) const {
    if (job.finish_reason() == "cancelled")
      return make_error(503, job.error().empty() ? "the request was cancelled" : job.error(),
                        "server_error", draining.load() ? "server_shutting_down" : "cancelled");
    return make_error(500, "generation failed: " + job.error(), "server_error", "internal_error");
  }
  static bool failed(const Job& job) {
    return job.finish_reason() == "error" || job.finish_reason() == "cancelled";
  }

  // Submits a request's jobs (its choices), or answers why not (forwarding to the fallback when
  // there is one).
  bool submit(const std::vector<std::shared_ptr<Job>>& jobs, const HttpRequest& req, const Ex& ex,
              const std::string& fallback_path, bool stream) {
    const Scheduler::Submit verdict = sched.submit_choices(jobs);
    // A job the scheduler did not take never finishes, so nothing would drop its listener, which
    // holds the request's state (and its in-flight count): drop it here.
    if (verdict != Scheduler::Submit::kOk)
      for (const auto& job : jobs) job->set_listener(nullptr);
    switch (verdict) {
      case Scheduler::Submit::kOk:
        ex->on_gone([jobs] {
          for (const auto& job : jobs) job->cancel();
        });
        return true;
      case Scheduler::Submit::kInvalidChoices:  // parse_completion checked `n` already
        bad_requests++;
        ex->send(error_response(make_error(400, "this request's choices cannot run on this server",
                                           "invalid_request_error", "")));
        return false;
      case Scheduler::Submit::kQueueFull:
        if (fallback) {
          forwarded++;
          fallback->forward(req.body, ex, fallback_path, stream, "queue-full");
          return false;
        }
        rejected_queue_full++;
        ex->send(error_response(
            make_error(503,
                       "the server is busy: all " + std::to_string(opt.scheduler.parallel) +
                           " slots are in use and the queue is full; retry later",
                       "server_error", "server_busy")));
        return false;
      case Scheduler::Submit::kDraining:
        ex->send(error_response(make_error(503, "the server is shutting down", "server_error",
                                           "server_shutting_down")));
        return false;
    }
    return false;
  }

  // Runs `on_done(texts)` on the connection's executor once every job has finished (texts[i] is
  // jobs[i]'s). Each job's listener posts there; the scheduler drops a listener (and with it its
  // hold on this state) when its job finishes.
  void when_done(const std::vector<std::shared_ptr<Job>>& jobs, const Ex& ex,
                 std::function<void(const std::vector<std::string>&)> on_done) {
    struct State {
      std::vector<std::shared_ptr<Job>> jobs;
      std::vector<std::string> texts;
      std::vector<bool> finished;
      bool done = false;
      std::function<void(const std::vector<std::string>&)> on_done;
      InFlight guard;
      explicit State(std::atomic<int>* n) : guard(n) {}
    };
    auto st = std::make_shared<State>(&in_flight);
    st->jobs = jobs;
    st->texts.resize(jobs.size());
    st->finished.assign(jobs.size(), false);
    st->on_done = std::move(on_done);
    for (const auto& job : jobs)
      job->set_listener([st, ex] {
        ex->post([st] {
          if (st->done) return;
          bool all = true;
          for (size_t i = 0; i < st->jobs.size(); ++i) {
            if (!st->finished[i]) st->finished[i] = st->jobs[i]->wait_text(0ms, &st->texts[i]);
            all = all && st->finished[i];
          }
          if (!all) return;
          st->done = true;
          // The jobs hold their listeners, which hold this state: let go of the jobs first.
          st->jobs.clear();
          st->on_done(st->texts);
        });
      });
  }

  void completions(const HttpRequest& req, const Ex& ex, bool chat) {
    InFlight guard(&in_flight);
    const std::string path = chat ? "/chat/completions" : "/completions";
    ApiError err;
    auto parsed = parse_completion(opt.api, *engine, req.body, chat, &err);
    if (!parsed) {
      if (fallback && !err.fallback_reason.empty()) {
        forwarded++;
        const json j = json::parse(req.body, nullptr, false);
        const bool stream = j.is_object() && j.contains("stream") && j["stream"] == true;
        return fallback->forward(req.body, ex, path, stream, err.fallback_reason);
      }
      bad_requests++;
      return ex->send(error_response(err));
    }
    auto r = std::make_shared<CompletionRequest>(std::move(*parsed));
    const std::string id = new_request_id(chat ? "chatcmpl" : "cmpl");
    const int64_t created = std::time(nullptr);
    if (r->stream) return stream(req, ex, r, id, created);
    when_done(r->choices, ex, [this, r, ex, id, created](const std::vector<std::string>& texts) {
      for (const auto& job : r->choices)
        if (failed(*job)) return ex->send(error_response(job_error(*job)));
      ex->send(json_response(200, completion_response(*r, opt.api, id, created, texts)));
    });
    submit(r->choices, req, ex, path, false);
  }

  // SSE: the head and (chat) one role chunk per choice with the first text, then text deltas as
  // the scheduler produces them, each carrying its choice's index, a finishing chunk per choice
  // (or an error event when a job failed or the drain deadline cut it), optional usage, and
  // [DONE] once every choice has finished. The connection writes a comment line after 250 ms of
  // silence, so a write fails soon after the client left, which cancels the jobs.
  void stream(const HttpRequest& req, const Ex& ex, std::shared_ptr<CompletionRequest> r,
              const std::string& id, int64_t created) {
    struct Choice {
      bool finished = false;
      size_t text_offset = 0;                       // completions' logprobs.text_offset so far
      std::optional<ReasoningSplitter> reasoning;   // chat with reasoning_format "auto"
      std::optional<ToolCallStreamGate> tool_gate;  // chat with tools to parse
    };
    struct State {
      std::shared_ptr<CompletionRequest> r;
      std::string id;
      int64_t created;
      bool started = false, finished = false;  // touched on the connection's executor only
      std::vector<Choice> choices;
      InFlight guard;
      explicit State(std::atomic<int>* n) : guard(n) {}
    };
    auto st = std::make_shared<State>(&in_flight);
    st->r = r;
    st->id = id;
    st->created = created;
    st->choices.resize(r->choices.size());
    for (auto& c : st->choices) {
      if (r->chat && r->split_reasoning) c.reasoning.emplace(r->reasoning_starts_inside);
      if (r->chat && r->tools.parse) c.tool_gate.emplace(r->tools.family);
    }
    auto pump = [this, st, ex] {
      if (st->finished) return;
      std::string out;
      bool all_done = true;
      const Job* failure = nullptr;
      for (size_t i = 0; i < st->choices.size(); ++i) {
        Choice& c = st->choices[i];
        if (c.finished) continue;
        Job& job = *st->r->choices[i];
        std::string text;
        const bool done = job.wait_text(0ms, &text);
        all_done = all_done && done;
        if (text.empty() && !done) continue;
        // The head goes out with the first output: until then a client that left is found by
        // the connection's probe, and the first bytes a client reads are the answer, not a
        // comment.
        if (!st->started) {
          st->started = true;
          HttpResponse head;
          head.content_type = "text/event-stream";
          head.set_header("Cache-Control", "no-cache");
          head.set_header("X-Accel-Buffering", "no");
          ex->begin_stream(std::move(head), StreamOptions{": keep-alive\n\n", 250ms});
          if (st->r->chat)
            for (size_t k = 0; k < st->choices.size(); ++k)
              out += sse(completion_chunk(*st->r, opt.api, st->id, st->created, "", nullptr, true,
                                          nullptr, "", nullptr, k));
        }
        std::vector<TokenLogprob> logprobs;
        job.take_logprobs(&logprobs);
        ReasoningPieces pieces{"", std::move(text)};
        if (c.reasoning) pieces = c.reasoning->take(pieces.content, done);
        // Content that may begin a tool call is held until the end, then parsed as a whole.
        std::vector<ToolCall> calls;
        if (c.tool_gate) {
          pieces.content = c.tool_gate->push(pieces.content);
          if (done) {
            ToolCallParse parsed = answer_tool_calls(st->r->tools, c.tool_gate->finish());
            pieces.content += parsed.content;
            calls = std::move(parsed.calls);
          }
        }
        if (!pieces.content.empty() || !pieces.reasoning.empty() || !logprobs.empty())
          out += sse(completion_chunk(*st->r, opt.api, st->id, st->created, pieces.content, nullptr,
                                      false, stream_logprobs(*st->r, logprobs, &c.text_offset),
                                      pieces.reasoning, nullptr, i));
        for (const json& delta : openai_tool_call_deltas(calls))
          out += sse(completion_chunk(*st->r, opt.api, st->id, st->created, "", nullptr, false,
                                      nullptr, "", delta, i));
        if (!done) continue;
        c.finished = true;
        if (failed(job)) {
          failure = &job;
        } else {
          out += sse(completion_chunk(*st->r, opt.api, st->id, st->created, "",
                                      calls.empty() ? api_finish_reason(job) : "tool_calls", false,
                                      nullptr, "", nullptr, i));
        }
      }
      // A failed choice ends the stream (the others are cancelled with the connection).
      const bool end = all_done || failure;
      if (end) {
        st->finished = true;
        if (failure) {
          out += sse(error_body(job_error(*failure)));
          for (const auto& job : st->r->choices) job->cancel();
        } else if (st->r->include_usage) {
          out += sse(usage_chunk(*st->r, opt.api, st->id, st->created));
        }
        out += "data: [DONE]\n\n";
      }
      if (!out.empty()) ex->write(std::move(out));
      if (end) ex->end();
    };
    for (const auto& job : r->choices) job->set_listener([ex, pump] { ex->post(pump); });
    submit(r->choices, req, ex, r->chat ? "/chat/completions" : "/completions", true);
  }

  void embeddings(const HttpRequest& req, const Ex& ex) {
    InFlight guard(&in_flight);
    ApiError err;
    bool base64 = false;
    auto job = parse_embeddings(opt.api, *engine, req.body, &base64, &err);
    if (!job) {
      if (fallback && !err.fallback_reason.empty()) {
        forwarded++;
        return fallback->forward(req.body, ex, "/embeddings", false, err.fallback_reason);
      }
      bad_requests++;
      return ex->send(error_response(err));
    }
    when_done({job}, ex, [this, job, ex, base64](const std::vector<std::string>&) {
      if (failed(*job)) return ex->send(error_response(job_error(*job)));
      ex->send(json_response(200, embeddings_response(*job, opt.api, base64)));
    });
    submit({job}, req, ex, "/embeddings", false);
  }

  std::string metrics() const;
};

std::string Server::Impl::metrics() const {
  const SchedulerStats s = sched.stats();
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
      << name << ' ' << v << '\n';
  };
  metric("hearth_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
         double(s.prompt_tokens));
  metric("hearth_prompt_tokens_evaluated_total", "counter",
         "Prompt tokens computed (the rest reused a cached prefix).", double(s.prompt_evaluated));
  o << "# HELP hearth_prefix_cache_hits_total Requests whose prompt started with a cached prefix: "
       "the slot's own (same_slot), copied from another slot (copied) or a finished request's "
       "cache "
       "kept beyond the slots (cached).\n"
    << "# TYPE hearth_prefix_cache_hits_total counter\n"
    << "hearth_prefix_cache_hits_total{source=\"same_slot\"} " << s.prefix_hits_same_slot << '\n'
    << "hearth_prefix_cache_hits_total{source=\"copied\"} " << s.prefix_hits_copied << '\n'
    << "hearth_prefix_cache_hits_total{source=\"cached\"} " << s.prefix_hits_cached << '\n';
  o << "# HELP hearth_prefix_cache_tokens_total Prompt tokens by where their KV came from: reused "
       "in the slot, copied from another slot, adopted from a kept cache, or computed.\n"
    << "# TYPE hearth_prefix_cache_tokens_total counter\n"
    << "hearth_prefix_cache_tokens_total{source=\"same_slot\"} " << s.prefix_tokens_same_slot
    << '\n'
    << "hearth_prefix_cache_tokens_total{source=\"copied\"} " << s.prefix_tokens_copied << '\n'
    << "hearth_prefix_cache_tokens_total{source=\"cached\"} " << s.prefix_tokens_cached << '\n'
    << "hearth_prefix_cache_tokens_total{source=\"computed\"} " << s.prompt_evaluated << '\n';
  metric("hearth_generated_tokens_total", "counter", "Tokens generated.",
         double(s.generated_tokens));
  metric("hearth_embedded_tokens_total", "counter", "Tokens pooled into embeddings.",
         double(s.embedded_tokens));
  metric("hearth_generation_tokens_per_second", "gauge",
         "Generated tokens per second over the last 10 seconds.", s.gen_tok_s_10s);
  o << "# HELP hearth_requests_total Requests by outcome.\n# TYPE hearth_requests_total counter\n"
    << "hearth_requests_total{outcome=\"finished\"} " << s.requests_finished << '\n'
    << "hearth_requests_total{outcome=\"cancelled\"} " << s.requests_cancelled << '\n'
    << "hearth_requests_total{outcome=\"failed\"} " << s.requests_failed << '\n'
    << "hearth_requests_total{outcome=\"rejected_queue_full\"} " << rejected_queue_full.load()
    << '\n'
    << "hearth_requests_total{outcome=\"invalid\"} " << bad_requests.load() << '\n'
    << "hearth_requests_total{outcome=\"refused\"} " << refused.load() << '\n'
    << "hearth_requests_total{outcome=\"forwarded\"} " << forwarded.load() << '\n';
  metric("hearth_queue_depth", "gauge", "Requests waiting for a slot.", s.queue_depth);
  metric("hearth_slots_busy", "gauge", "Slots running a request.", s.slots_busy);
  metric("hearth_slots_total", "gauge", "Slots (--parallel).", s.slots_total);
  metric("hearth_kv_positions_used", "gauge", "KV cache positions holding entries.",
         double(s.kv_used));
  metric("hearth_kv_positions_capacity", "gauge", "KV cache positions in all slots.",
         double(s.kv_capacity));
  metric("hearth_kv_bytes", "gauge",
         "Bytes of KV cache memory committed now (the pool's blocks in use, sliding rings).",
         double(s.kv_bytes));
  metric("hearth_kv_pool_tokens", "gauge", "Positions of the KV pool the slots share.",
         double(s.kv_pool_tokens));
  metric("hearth_kv_block_tokens", "gauge", "Positions per KV pool block.",
         double(s.kv_block_tokens));
  o << "# HELP hearth_kv_blocks KV pool blocks: held by sequences and cached prefixes (used) or "
       "free.\n# TYPE hearth_kv_blocks gauge\n"
    << "hearth_kv_blocks{state=\"used\"} " << s.kv_blocks_used << '\n'
    << "hearth_kv_blocks{state=\"free\"} " << s.kv_blocks_total - s.kv_blocks_used << '\n';
  metric("hearth_kv_blocks_total", "gauge", "KV pool blocks.", double(s.kv_blocks_total));
  metric("hearth_prefix_cache_evictions_total", "counter",
         "Cached prefixes dropped to make room in the KV pool.", double(s.prefix_evictions));
  metric("hearth_kv_caches_made_total", "counter",
         "KV caches made after start (stashing a history with no spare cache left).",
         double(s.kv_caches_made));
  metric("hearth_preemptions_total", "counter",
         "Running sequences preempted by a full KV pool (requeued, recomputed later).",
         double(s.preemptions));
  metric("hearth_forward_steps_total", "counter", "Batched forward passes run.", double(s.steps));
  metric("hearth_forward_seconds_total", "counter", "Seconds spent in batched forward passes.",
         s.forward_seconds);
  metric("hearth_step_seconds_total", "counter",
         "Seconds spent in scheduler steps (forward passes, sampling, streaming, KV commits).",
         s.step_seconds);
  metric("hearth_place_seconds_total", "counter",
         "Seconds spent placing admitted requests (slot choice, prefix copies).", s.place_seconds);
  metric("hearth_requests_in_flight", "gauge", "HTTP requests being answered.", in_flight.load());
  metric("hearth_http_connections", "gauge", "Open HTTP connections.",
         http ? double(http->open_connections()) : 0.0);
  return o.str();
}

Server::Server(std::shared_ptr<const Engine> engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(engine), std::move(options))) {}

Server::~Server() {
  impl_->sched.stop();
  if (impl_->http) impl_->http->stop();
}

int Server::port() const {
  return impl_->http ? impl_->http->port() : -1;
}

SchedulerStats Server::scheduler_stats() const {
  return impl_->sched.stats();
}

Status Server::start() {
  Impl& m = *impl_;
  if (!is_loopback_host(m.opt.host) && m.opt.api_key.empty())
    return Status::error("--host " + m.opt.host +
                         " makes the server reachable from other machines; give --api-key KEY "
                         "(or bind 127.0.0.1)");
  if (!m.opt.fallback_url.empty()) {
    HEARTH_ASSIGN_OR_RETURN(m.fallback, Fallback::create(m.opt.fallback_url, m.opt.fallback_key));
  }
  m.opt.api.ctx_size = m.opt.scheduler.ctx_size;
  m.opt.api.slots = m.opt.scheduler.parallel;
  if (!m.opt.api.chat_tokenizer)
    m.opt.api.chat_tokenizer = std::make_shared<const ChatTokenizer>(m.engine->tokenizer());
  m.policy = make_origin_policy(m.opt.host, m.opt.allowed_hosts, m.opt.cors_origins);
  HEARTH_TRY(m.sched.start());
  ConnectionLimits limits = m.opt.connections;
  limits.request.body_bytes = m.opt.max_body_bytes;
  if (m.opt.http_threads > 0) limits.io_threads = m.opt.http_threads;
  m.http = std::make_unique<HttpListener>(limits,
                                          [&m](HttpRequest req, std::shared_ptr<HttpExchange> ex) {
                                            m.handle(std::move(req), std::move(ex));
                                          });
  const std::string bind_host = m.opt.host == "localhost" ? "127.0.0.1" : m.opt.host;
  const Status st = m.http->bind(bind_host, m.opt.port);
  if (!st.is_ok())
    return Status::error("cannot bind " + m.opt.host + ":" + std::to_string(m.opt.port) +
                         " (in use, or not an address of this machine): " + st.message());
  return Status::ok();
}

Status Server::serve() {
  impl_->http->run();
  return Status::ok();
}

void Server::shutdown(std::chrono::milliseconds drain) {
  Impl& m = *impl_;
  m.draining.store(true);
  m.sched.begin_drain();
  m.sched.wait_idle(drain);
  // The deadline: what still runs ends as "cancelled", so its stream gets an error event and
  // [DONE] instead of a cut connection; give the connections a moment to write those.
  m.sched.stop();
  const auto flush_deadline = Clock::now() + 2s;
  while (m.in_flight.load() > 0 && Clock::now() < flush_deadline) std::this_thread::sleep_for(10ms);
  m.http->stop();
}

}  // namespace hearth::server
