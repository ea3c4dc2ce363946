// serve-load.h: the clients (cpp-httplib, one keep-alive connection and thread each), the SSE
// reader that timestamps each chunk, and the prompts. New request fields go in request_body().
#include "serve-load.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

namespace hearth::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Token ids of the prompts: past the control and byte tokens at the start of SentencePiece and
// byte-level vocabularies, inside any vocabulary of 1000 ids or more.
constexpr int32_t kFirstPromptId = 300;
constexpr int32_t kLastPromptId = 999;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string request_body(const ServeLoadOptions& o, int index) {
  nlohmann::json j = {{"prompt", serve_prompt(o, index)},
                      {"max_tokens", o.gen_tokens},
                      {"ignore_eos", true},  // llama-server's and vLLM's field, as hearth's
                      {"temperature", 0},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}}};
  if (o.sampled) {
    j["temperature"] = o.temperature;
    j["top_p"] = o.top_p;
    j["top_k"] = o.top_k;  // llama-server's and hearth's extensions
    j["min_p"] = o.min_p;
    j["seed"] = uint64_t(index) + 1;  // reproducible runs, a different draw per request
  }
  return j.dump();
}

// Reads one streamed answer's SSE events as they arrive and times its chunks.
class SseTimer {
 public:
  SseTimer(Clock::time_point sent, ServeRequestTrace* trace) : sent_(sent), trace_(trace) {}

  // Feeds received bytes; false stops the transfer (an error event, or far too much data).
  bool feed(const char* data, size_t n) {
    buffer_.append(data, n);
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      const std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      if (!event_(event)) return false;
    }
    return buffer_.size() < (1u << 20);
  }
  bool done() const { return done_; }
  int64_t chunks_with_text() const { return chunks_; }
  bool got_usage() const { return usage_; }

 private:
  bool event_(const std::string& event) {
    if (event.rfind("data: ", 0) != 0) return true;  // ": keep-alive" comments
    const std::string payload = event.substr(6);
    if (payload == "[DONE]") {
      done_ = true;
      return true;
    }
    const auto j = nlohmann::json::parse(payload, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      trace_->error = "a stream event is not JSON: " + payload.substr(0, 120);
      return false;
    }
    if (j.contains("error")) {
      trace_->error = "error event: " + j["error"].dump().substr(0, 200);
      return false;
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      trace_->completion_tokens = u->value("completion_tokens", int64_t(0));
      usage_ = true;
    }
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty()) return true;
    const auto& c = (*choices)[0];
    // (json::empty() is false for every string, so the text is checked as a string.)
    const auto t = c.find("text");
    const bool text = t != c.end() && t->is_string() && !t->get_ref<const std::string&>().empty();
    if (!text) return true;
    const auto now = Clock::now();
    if (chunks_ == 0)
      trace_->ttft_ms = ms_between(sent_, now);
    else
      trace_->itl_ms.push_back(ms_between(last_, now));
    last_ = now;
    ++chunks_;
    return true;
  }

  Clock::time_point sent_, last_;
  ServeRequestTrace* trace_;
  std::string buffer_;
  int64_t chunks_ = 0;
  bool done_ = false, usage_ = false;
};

void run_one(httplib::Client& cli, const ServeLoadOptions& o, int index, Clock::time_point t0,
             ServeRequestTrace* trace) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers.emplace("Content-Type", "application/json");
  if (!o.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + o.api_key);
  req.body = request_body(o, index);
  int status = 0;
  std::string error_body;
  const auto sent = Clock::now();
  SseTimer timer(sent, trace);
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return error_body.size() < 4096;
    }
    return timer.feed(data, n);
  };
  trace->start_s = std::chrono::duration<double>(sent - t0).count();
  auto r = cli.send(req);
  trace->end_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!trace->error.empty()) return;
  if (!r) {
    trace->error = "no answer (" + httplib::to_string(r.error()) + ")";
    return;
  }
  if (status != 200) {
    trace->error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 200);
    return;
  }
  if (!timer.done()) {
    trace->error = "the stream ended without [DONE]";
    return;
  }
  if (!timer.got_usage()) trace->completion_tokens = timer.chunks_with_text();
  if (trace->completion_tokens != o.gen_tokens) {
    trace->error = "generated " + std::to_string(trace->completion_tokens) + " tokens, not " +
                   std::to_string(o.gen_tokens) + " (does the server honour ignore_eos?)";
    return;
  }
  trace->ok = true;
}

}  // namespace

Status check_serve_options(const ServeLoadOptions& o) {
  if (o.url.rfind("http://", 0) != 0)
    return Status::error("--serve: '" + o.url + "' must be an http:// URL such as " +
                         "http://127.0.0.1:8080");
  if (o.clients < 1 || o.clients > 1024)
    return Status::error("--clients must be from 1 to 1024; it is " + std::to_string(o.clients));
  if (o.prompt_tokens < 1 || o.prompt_tokens > (1 << 20))
    return Status::error("--prompt-tokens must be from 1 to 1048576; it is " +
                         std::to_string(o.prompt_tokens));
  if (o.gen_tokens < 1 || o.gen_tokens > (1 << 20))
    return Status::error("--gen-tokens must be from 1 to 1048576; it is " +
                         std::to_string(o.gen_tokens));
  if (o.shared_prefix < 0 || o.shared_prefix > o.prompt_tokens)
    return Status::error("--shared-prefix must be from 0 to --prompt-tokens (" +
                         std::to_string(o.prompt_tokens) + "); it is " +
                         std::to_string(o.shared_prefix));
  if (o.requests < 0) return Status::error("--requests must be at least 1");
  if (!(o.timeout_s > 0)) return Status::error("the request timeout must be positive");
  return Status::ok();
}

std::vector<int32_t> serve_prompt(const ServeLoadOptions& o, int index) {
  std::uniform_int_distribution<int32_t> id(kFirstPromptId, kLastPromptId);
  std::vector<int32_t> ids;
  ids.reserve(size_t(o.prompt_tokens));
  std::mt19937_64 shared(o.seed);
  while (int(ids.size()) < o.shared_prefix) ids.push_back(id(shared));
  // Each request's own ids: a stream of its own, so no two requests share more than the prefix
  // by construction (the first id after the prefix differs with probability 699/700).
  std::mt19937_64 own(o.seed * 0x9E3779B97F4A7C15ull + uint64_t(index) + 1);
  while (int(ids.size()) < o.prompt_tokens) ids.push_back(id(own));
  return ids;
}

Result<std::vector<ServeRequestTrace>> run_serve_load(
    const ServeLoadOptions& o, const std::function<void(const std::string&)>& progress) {
  HEARTH_TRY(check_serve_options(o));
  const int total = o.requests > 0 ? o.requests : 4 * o.clients;
  std::vector<ServeRequestTrace> traces(static_cast<size_t>(total));
  std::atomic<int> next{0}, finished{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < std::min(o.clients, total); ++c)
    clients.emplace_back([&] {
      httplib::Client cli(o.url);
      cli.set_connection_timeout(5);
      cli.set_read_timeout(std::chrono::milliseconds(int64_t(o.timeout_s * 1000)));
      cli.set_keep_alive(true);
      // cpp-httplib writes a request's head and body separately: with Nagle on, the body waits
      // for the server's delayed ACK of the head (40 ms on Linux), which was most of a
      // prefix-cache hit's measured time to first token. Interactive clients send at once.
      cli.set_tcp_nodelay(true);
      for (int i; (i = next.fetch_add(1)) < total;) {
        run_one(cli, o, i, t0, &traces[size_t(i)]);
        const int done = finished.fetch_add(1) + 1;
        if (progress && (done % std::max(1, total / 10) == 0 || done == total))
          progress(std::to_string(done) + "/" + std::to_string(total) + " requests");
      }
    });
  for (auto& t : clients) t.join();
  return traces;
}

}  // namespace hearth::bench
