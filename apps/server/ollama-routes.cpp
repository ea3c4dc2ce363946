// Ollama routes: parse (ollama-api.cpp), submit to the scheduler, answer once the job is done or
// stream NDJSON as its text arrives. Everything after submit runs on the connection's executor,
// posted by the job's listener, so no thread waits for a client.
#include "ollama-routes.h"

#include <chrono>
#include <optional>

#include "in-flight.h"
#include "ollama-api.h"
#include "runtime/reasoning-split.h"

namespace hearth::server {

using namespace std::chrono_literals;
using Ex = std::shared_ptr<HttpExchange>;
using SteadyClock = std::chrono::steady_clock;

OllamaMethod ollama_method(const std::string& path) {
  if (path == "/api/tags" || path == "/api/ps" || path == "/api/version") return OllamaMethod::kGet;
  if (path == "/api/chat" || path == "/api/generate" || path == "/api/embed" ||
      path == "/api/embeddings" || path == "/api/show")
    return OllamaMethod::kPost;
  return OllamaMethod::kNone;
}

namespace {

HttpResponse json_answer(int status, const json& j) {
  return json_http_response(status, json_text(j), "application/json; charset=utf-8");
}

HttpResponse error_answer(const OllamaError& e) {
  HttpResponse r = json_answer(e.status, ollama_error_body(e));
  if (e.status == 503) r.set_header("Retry-After", "1");
  return r;
}

bool failed(const Job& job) {
  return job.finish_reason() == "error" || job.finish_reason() == "cancelled";
}

OllamaError job_error(const Job& job) {
  if (job.finish_reason() == "cancelled")
    return {503, job.error().empty() ? "the request was cancelled" : job.error()};
  return {500, "generation failed: " + job.error()};
}

}  // namespace

HttpResponse OllamaRoutes::get(const std::string& path) const {
  if (path == "/api/version") return json_answer(200, ollama_version());
  if (path == "/api/ps") return json_answer(200, ollama_ps(*c_.api, *c_.engine));
  return json_answer(200, ollama_tags(*c_.api, *c_.engine));
}

void OllamaRoutes::post(const HttpRequest& req, const Ex& ex) const {
  const std::string& p = req.path;
  if (p == "/api/chat" || p == "/api/generate") return generate(req, ex, p == "/api/chat");
  if (p == "/api/embed" || p == "/api/embeddings") return embed(req, ex, p == "/api/embeddings");
  OllamaError err;
  if (!parse_ollama_show(*c_.api, req.body, &err)) {
    c_.bad_requests->fetch_add(1);
    return ex->send(error_answer(err));
  }
  ex->send(json_answer(200, ollama_show(*c_.api, *c_.engine)));
}

bool OllamaRoutes::submit(const std::shared_ptr<Job>& job, const Ex& ex) const {
  switch (c_.scheduler->submit(job)) {
    case Scheduler::Submit::kOk:
      ex->on_gone([job] { job->cancel(); });
      return true;
    case Scheduler::Submit::kQueueFull:
      c_.rejected_queue_full->fetch_add(1);
      ex->send(error_answer({503,
                             "the server is busy: every slot is in use and the queue is "
                             "full; retry later"}));
      return false;
    case Scheduler::Submit::kDraining:
      ex->send(error_answer({503, "the server is shutting down"}));
      return false;
    case Scheduler::Submit::kInvalidChoices:  // not for one job; listed for completeness
      ex->send(error_answer({400, "this request cannot run on this server"}));
      return false;
  }
  return false;
}

void OllamaRoutes::generate(const HttpRequest& req, const Ex& ex, bool chat) const {
  InFlight guard(c_.in_flight);
  const auto received = SteadyClock::now();
  OllamaError err;
  auto parsed = parse_ollama_generate(*c_.api, *c_.engine, req.body, chat, &err);
  if (!parsed) {
    c_.bad_requests->fetch_add(1);
    return ex->send(error_answer(err));
  }
  auto r = std::make_shared<OllamaGenerate>(std::move(*parsed));
  if (r->load_only) return ex->send(json_answer(200, ollama_final(*c_.api, *r, "", received)));
  const ApiConfig* api = c_.api;
  struct State {
    std::string text;                             // the whole answer (not streamed)
    bool started = false, finished = false;       // touched on the connection's executor only
    std::optional<ReasoningSplitter> thinking;    // streamed with think: true
    std::optional<ToolCallStreamGate> tool_gate;  // streamed chat with tools to parse
    InFlight guard;
    explicit State(std::atomic<int>* n) : guard(n) {}
  };
  auto st = std::make_shared<State>(c_.in_flight);
  if (r->think) st->thinking.emplace(r->reasoning_starts_inside);
  if (r->tools.parse) st->tool_gate.emplace(r->tools.family);
  // NDJSON has no comment line, so the stream writes nothing while idle: a client that left is
  // found by the connection's probe or the next token's write, which cancels the job.
  auto pump = [api, st, r, ex, received] {
    if (st->finished) return;
    Job& job = *r->job;
    std::string text;
    const bool done = job.wait_text(0ms, &text);
    if (!r->stream) {
      st->text += text;
      if (!done) return;
      st->finished = true;
      if (failed(job)) return ex->send(error_answer(job_error(job)));
      return ex->send(json_answer(200, ollama_final(*api, *r, st->text, received)));
    }
    if (text.empty() && !done) return;
    if (!st->started) {
      st->started = true;
      HttpResponse head;
      head.content_type = "application/x-ndjson";
      head.set_header("Cache-Control", "no-cache");
      head.set_header("X-Accel-Buffering", "no");
      ex->begin_stream(std::move(head), StreamOptions{"", 250ms});
    }
    std::string out;
    ReasoningPieces pieces{"", std::move(text)};
    if (st->thinking) {
      pieces = st->thinking->take(pieces.content, done);
    }
    // Text that may begin a tool call is held to the end; the calls go out in one chunk then.
    std::vector<ToolCall> calls;
    if (st->tool_gate) {
      pieces.content = st->tool_gate->push(pieces.content);
      if (done) {
        ToolCallParse parsed = answer_tool_calls(r->tools, st->tool_gate->finish());
        pieces.content += parsed.content;
        calls = std::move(parsed.calls);
      }
    }
    if (!pieces.content.empty() || !pieces.reasoning.empty() || !calls.empty())
      out += json_text(ollama_chunk(*api, r->chat, pieces.content, pieces.reasoning, calls)) + "\n";
    if (done) {
      st->finished = true;
      // Ollama's streams end a failure with an {"error": ...} line.
      out += json_text(failed(job) ? ollama_error_body(job_error(job))
                                   : ollama_final(*api, *r, "", received)) +
             "\n";
    }
    ex->write(std::move(out));
    if (done) ex->end();
  };
  r->job->set_listener([ex, pump] { ex->post(pump); });
  submit(r->job, ex);
}

void OllamaRoutes::embed(const HttpRequest& req, const Ex& ex, bool legacy) const {
  InFlight guard(c_.in_flight);
  const auto received = SteadyClock::now();
  OllamaError err;
  auto parsed = parse_ollama_embed(*c_.api, *c_.engine, req.body, legacy, &err);
  if (!parsed) {
    c_.bad_requests->fetch_add(1);
    return ex->send(error_answer(err));
  }
  auto r = std::make_shared<OllamaEmbed>(std::move(*parsed));
  const ApiConfig* api = c_.api;
  auto guard_state = std::make_shared<InFlight>(c_.in_flight);
  r->job->set_listener([api, r, ex, received, guard_state] {
    ex->post([api, r, ex, received, guard_state] {
      std::string ignored;
      if (!r->job->wait_text(0ms, &ignored)) return;
      if (failed(*r->job)) return ex->send(error_answer(job_error(*r->job)));
      ex->send(json_answer(200, ollama_embed_response(*api, *r, received)));
    });
  });
  submit(r->job, ex);
}

}  // namespace hearth::server
