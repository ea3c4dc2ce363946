// Routes and policies of `hearth serve` on cpp-httplib: request checks before routing, the
// OpenAI endpoints (SSE streaming with heartbeats that notice gone clients), metrics, drain.
// New endpoints: add a route in routes(); shared checks belong in pre_route().
#include <httplib.h>

#include <atomic>
#include <cstring>
#include <ctime>
#include <sstream>
#include <thread>

#include "chat-page.h"
#include "connection-watch.h"
#include "fallback.h"
#include "server.h"

namespace hearth::server {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(json_text(error_body(e)), "application/json");
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

// The host part of a Host header ("[::1]:8080" -> "::1", "localhost:80" -> "localhost").
std::string host_of(const std::string& header) {
  if (!header.empty() && header[0] == '[') {
    const size_t close = header.find(']');
    return close == std::string::npos ? header : header.substr(1, close - 1);
  }
  return header.substr(0, header.find(':'));
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
  httplib::Server http;
  std::unique_ptr<Fallback> fallback;
  std::atomic<int> in_flight{0};
  std::atomic<bool> draining{false};
  std::atomic<int64_t> rejected_queue_full{0}, forwarded{0}, bad_requests{0};
  int64_t created = std::time(nullptr);
  int port = -1;

  Impl(std::shared_ptr<const Engine> e, ServerOptions o)
      : engine(std::move(e)), opt(std::move(o)), sched(engine, opt.scheduler) {}

  // Counts a handler (or a stream it started) as in flight until destroyed.
  struct InFlight {
    std::atomic<int>* n;
    explicit InFlight(std::atomic<int>* c) : n(c) { n->fetch_add(1); }
    ~InFlight() { n->fetch_sub(1); }
  };

  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res) {
    using HR = httplib::Server::HandlerResponse;
    // DNS rebinding: a web page on evil.example resolving to 127.0.0.1 still sends its own
    // name as Host, so a loopback server only answers to loopback names.
    if (is_loopback_host(opt.host) && req.has_header("Host") &&
        !is_loopback_host(host_of(req.get_header_value("Host")))) {
      send_error(res, make_error(403,
                                 "Host header '" + req.get_header_value("Host") +
                                     "' is not allowed: this server only answers to localhost",
                                 "invalid_request_error", "invalid_host"));
      return HR::Handled;
    }
    const bool open_path = req.path == "/" || req.path == "/health";
    if (!opt.api_key.empty() && !open_path) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      if (auth.rfind(prefix, 0) != 0 ||
          !equal_constant_time(auth.substr(prefix.size()), opt.api_key)) {
        send_error(res,
                   make_error(401,
                              auth.empty() ? "Missing API key: send 'Authorization: Bearer KEY'"
                                           : "Incorrect API key provided",
                              "invalid_request_error", "invalid_api_key"));
        return HR::Handled;
      }
    }
    if (draining.load() && req.method == "POST") {
      send_error(res, make_error(503, "the server is shutting down", "server_error",
                                 "server_shutting_down"));
      res.set_header("Connection", "close");
      return HR::Handled;
    }
    return HR::Unhandled;
  }

  // Waits for a non-streaming job; a client that hung up cancels it.
  void wait_job(const httplib::Request& req, Job& job, std::string* text) {
    const int fd = find_connection_fd(req.remote_addr, req.remote_port, req.local_port);
    while (!job.wait_text(100ms, text)) {
      if (peer_closed(fd)) job.cancel();
    }
  }

  bool job_failed(Job& job, httplib::Response& res) {
    if (job.finish_reason() == "error") {
      send_error(res, make_error(500, "generation failed: " + job.error(), "server_error",
                                 "internal_error"));
      return true;
    }
    if (job.finish_reason() == "cancelled") {
      send_error(res,
                 make_error(503, job.error().empty() ? "the request was cancelled" : job.error(),
                            "server_error", "cancelled"));
      return true;
    }
    return false;
  }

  // Submits a job, or answers why not (forwarding to the fallback when there is one).
  bool submit(const std::shared_ptr<Job>& job, const httplib::Request& req, httplib::Response& res,
              const std::string& fallback_path, bool stream) {
    switch (sched.submit(job)) {
      case Scheduler::Submit::kOk:
        return true;
      case Scheduler::Submit::kQueueFull:
        if (fallback) {
          forwarded++;
          fallback->forward(req, res, fallback_path, stream, "queue-full");
          return false;
        }
        rejected_queue_full++;
        send_error(res,
                   make_error(503,
                              "the server is busy: all " + std::to_string(opt.scheduler.parallel) +
                                  " slots are in use and the queue is full; retry later",
                              "server_error", "server_busy"));
        return false;
      case Scheduler::Submit::kDraining:
        send_error(res, make_error(503, "the server is shutting down", "server_error",
                                   "server_shutting_down"));
        return false;
    }
    return false;
  }

  void completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    InFlight guard(&in_flight);
    const std::string path = chat ? "/chat/completions" : "/completions";
    ApiError err;
    auto parsed = parse_completion(opt.api, *engine, req.body, chat, &err);
    if (!parsed) {
      if (fallback && !err.fallback_reason.empty()) {
        forwarded++;
        const json j = json::parse(req.body, nullptr, false);
        const bool stream = j.is_object() && j.value("stream", false) == true;
        return fallback->forward(req, res, path, stream, err.fallback_reason);
      }
      bad_requests++;
      return send_error(res, err);
    }
    auto r = std::make_shared<CompletionRequest>(std::move(*parsed));
    if (!submit(r->job, req, res, path, r->stream)) return;
    const std::string id = new_request_id(chat ? "chatcmpl" : "cmpl");
    const int64_t created = std::time(nullptr);
    if (!r->stream) {
      std::string text;
      wait_job(req, *r->job, &text);
      if (job_failed(*r->job, res)) return;
      res.set_content(json_text(completion_response(*r, opt.api, id, created, text)),
                      "application/json");
      return;
    }
    stream(req, res, r, id, created);
  }

  // SSE: a first chunk at once, then text deltas as the scheduler produces them, the finishing
  // chunk, optional usage, and [DONE]. Comment lines every 250 ms of silence let a write fail
  // soon after the client left, which cancels the job (together with the socket poll).
  void stream(const httplib::Request& req, httplib::Response& res,
              std::shared_ptr<CompletionRequest> r, const std::string& id, int64_t created) {
    struct State {
      std::shared_ptr<CompletionRequest> r;
      std::string id;
      int64_t created;
      int fd;
      bool first = true, finished = false;
      Clock::time_point last_write = Clock::now();
      std::unique_ptr<InFlight> guard;
    };
    auto st = std::make_shared<State>();
    st->r = std::move(r);
    st->id = id;
    st->created = created;
    st->fd = find_connection_fd(req.remote_addr, req.remote_port, req.local_port);
    st->guard = std::make_unique<InFlight>(&in_flight);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](size_t, httplib::DataSink& sink) {
          Job& job = *st->r->job;
          auto write = [&](const std::string& s) {
            st->last_write = Clock::now();
            if (sink.write(s.data(), s.size())) return true;
            job.cancel();
            return false;
          };
          if (st->first) {
            st->first = false;
            if (st->r->chat && !write(sse(completion_chunk(*st->r, opt.api, st->id, st->created, "",
                                                           nullptr, true))))
              return false;
          }
          std::string text;
          const bool done = job.wait_text(100ms, &text);
          if (!text.empty() && !write(sse(completion_chunk(*st->r, opt.api, st->id, st->created,
                                                           text, nullptr, false))))
            return false;
          if (!done) {
            if (peer_closed(st->fd)) {
              job.cancel();
              return false;
            }
            if (Clock::now() - st->last_write > 250ms && !write(": keep-alive\n\n")) return false;
            return true;
          }
          std::string tail;
          if (job.finish_reason() == "error" || job.finish_reason() == "cancelled") {
            ApiError e = make_error(500, "generation failed: " + job.error(), "server_error",
                                    "internal_error");
            if (job.finish_reason() == "cancelled")
              e = make_error(503, job.error(), "server_error", "cancelled");
            tail += sse(error_body(e));
          } else {
            tail += sse(completion_chunk(*st->r, opt.api, st->id, st->created, "",
                                         api_finish_reason(job), false));
            if (st->r->include_usage)
              tail += sse(usage_chunk(*st->r, opt.api, st->id, st->created));
          }
          tail += "data: [DONE]\n\n";
          st->finished = true;
          if (!write(tail)) return false;
          sink.done();
          return true;
        },
        [st](bool) {
          if (!st->finished) st->r->job->cancel();
          st->guard.reset();
        });
  }

  void embeddings(const httplib::Request& req, httplib::Response& res) {
    InFlight guard(&in_flight);
    ApiError err;
    bool base64 = false;
    auto job = parse_embeddings(opt.api, *engine, req.body, &base64, &err);
    if (!job) {
      if (fallback && !err.fallback_reason.empty()) {
        forwarded++;
        return fallback->forward(req, res, "/embeddings", false, err.fallback_reason);
      }
      bad_requests++;
      return send_error(res, err);
    }
    if (!submit(job, req, res, "/embeddings", false)) return;
    std::string unused;
    wait_job(req, *job, &unused);
    if (job_failed(*job, res)) return;
    res.set_content(json_text(embeddings_response(*job, opt.api, base64)), "application/json");
  }

  std::string metrics() const {
    const SchedulerStats s = sched.stats();
    std::ostringstream o;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << ' ' << v << '\n';
    };
    metric("hearth_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
           double(s.prompt_tokens));
    metric("hearth_prompt_tokens_evaluated_total", "counter",
           "Prompt tokens computed (the rest reused a slot's cached prefix).",
           double(s.prompt_evaluated));
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
      << "hearth_requests_total{outcome=\"forwarded\"} " << forwarded.load() << '\n';
    metric("hearth_queue_depth", "gauge", "Requests waiting for a slot.", s.queue_depth);
    metric("hearth_slots_busy", "gauge", "Slots running a request.", s.slots_busy);
    metric("hearth_slots_total", "gauge", "Slots (--parallel).", s.slots_total);
    metric("hearth_kv_positions_used", "gauge", "KV cache positions holding entries.",
           double(s.kv_used));
    metric("hearth_kv_positions_capacity", "gauge", "KV cache positions in all slots.",
           double(s.kv_capacity));
    metric("hearth_kv_bytes", "gauge", "Bytes of KV cache allocated for the slots.",
           double(s.kv_bytes));
    metric("hearth_forward_steps_total", "counter", "Batched forward passes run.", double(s.steps));
    metric("hearth_forward_seconds_total", "counter", "Seconds spent in batched forward passes.",
           s.forward_seconds);
    metric("hearth_requests_in_flight", "gauge", "HTTP requests being answered.", in_flight.load());
    return o.str();
  }

  void routes() {
    http.set_pre_routing_handler(
        [this](const httplib::Request& q, httplib::Response& r) { return pre_route(q, r); });
    http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
      if (!r.body.empty()) return;
      std::string msg = "HTTP error " + std::to_string(r.status);
      std::string code;
      if (r.status == 404) {
        msg = "Unknown request URL: " + q.method + " " + q.path;
        code = "unknown_url";
      } else if (r.status == 413) {
        msg = "the request body is larger than " + std::to_string(opt.max_body_bytes) + " bytes";
        code = "request_too_large";
      }
      send_error(r, make_error(r.status, msg, "invalid_request_error", code));
    });
    // Last line of defence: whatever a handler throws is a 500 in the API's shape, never a
    // terminated process; the exception's text stays in the server (it may echo request bytes).
    http.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& r, std::exception_ptr) {
          bad_requests++;
          send_error(r, make_error(500, "the server failed to answer this request", "server_error",
                                   "internal_error"));
        });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_content(kChatPage, kChatPageSize, "text/html; charset=utf-8");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const SchedulerStats s = sched.stats();
      json j = {{"status", draining.load() ? "draining" : "ok"},
                {"model", opt.api.model_id},
                {"slots_busy", s.slots_busy},
                {"slots_total", s.slots_total},
                {"queue_depth", s.queue_depth}};
      res.status = draining.load() ? 503 : 200;
      res.set_content(json_text(j), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(json_text(models_response(opt.api, created)), "application/json");
    });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& q, httplib::Response& r) { completions(q, r, true); });
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
      completions(q, r, false);
    });
    http.Post("/v1/embeddings",
              [this](const httplib::Request& q, httplib::Response& r) { embeddings(q, r); });
  }
};

Server::Server(std::shared_ptr<const Engine> engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(engine), std::move(options))) {}

Server::~Server() {
  impl_->http.stop();
  impl_->sched.stop();
}

int Server::port() const {
  return impl_->port;
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
  HEARTH_TRY(m.sched.start());
  // Each streaming client holds a worker thread, so there must be one per slot and queued
  // request, plus spare ones so a full queue still gets its quick 503.
  int threads = m.opt.http_threads;
  if (threads <= 0)
    threads =
        std::min(512, std::max(32, m.opt.scheduler.parallel + m.opt.scheduler.max_queue + 16));
  m.http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  m.http.set_payload_max_length(m.opt.max_body_bytes);
  m.http.set_keep_alive_timeout(5);
  m.http.set_read_timeout(30);
  m.routes();
  const std::string bind_host = m.opt.host == "localhost" ? "127.0.0.1" : m.opt.host;
  if (m.opt.port == 0) {
    m.port = m.http.bind_to_any_port(bind_host);
    if (m.port <= 0) return Status::error("cannot bind " + m.opt.host + " (any port)");
  } else {
    if (!m.http.bind_to_port(bind_host, m.opt.port))
      return Status::error("cannot bind " + m.opt.host + ":" + std::to_string(m.opt.port) +
                           " (in use, or not an address of this machine)");
    m.port = m.opt.port;
  }
  return Status::ok();
}

Status Server::serve() {
  if (!impl_->http.listen_after_bind())
    return Status::error("the HTTP server stopped with an error");
  return Status::ok();
}

void Server::shutdown(std::chrono::milliseconds drain) {
  Impl& m = *impl_;
  m.draining.store(true);
  m.sched.begin_drain();
  const auto deadline = Clock::now() + drain;
  m.sched.wait_idle(drain);
  // Streams still write their last chunks after the scheduler is idle.
  while (m.in_flight.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  m.http.stop();
  m.sched.stop();
}

}  // namespace hearth::server
