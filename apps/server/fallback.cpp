// Fallback forwarding with cpp-httplib's client (only the server side moved to Asio). Each
// forward opens its own connection on its own thread, so a slow remote never blocks other
// requests; timeouts bound a dead one.
#include "fallback.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

namespace hearth::server {

Result<std::unique_ptr<Fallback>> Fallback::create(const std::string& url, const std::string& key) {
  const bool http = url.rfind("http://", 0) == 0, https = url.rfind("https://", 0) == 0;
  if (!http && !https)
    return Status::error("--fallback: '" + url + "' must start with http:// or https://");
  const size_t host_start = url.find("://") + 3;
  const size_t slash = url.find('/', host_start);
  auto fb = std::make_unique<Fallback>();
  fb->url_ = url;
  fb->origin_ = url.substr(0, slash);
  fb->base_path_ = slash == std::string::npos ? "" : url.substr(slash);
  while (!fb->base_path_.empty() && fb->base_path_.back() == '/') fb->base_path_.pop_back();
  if (host_start >= fb->origin_.size())
    return Status::error("--fallback: '" + url + "' has no host");
  fb->key_ = key;
  return fb;
}

namespace {
std::string error_json(const std::string& message) {
  return nlohmann::json{{"error",
                         {{"message", message},
                          {"type", "server_error"},
                          {"param", nullptr},
                          {"code", "fallback_failed"}}}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Runs on the forwarding thread: the blocking client call, answered on ex.
void relay(const std::string& origin, const std::string& url, const std::string& target,
           const httplib::Headers& headers, const std::string& body, bool stream,
           const std::string& reason, HttpExchange& ex) {
  httplib::Client cli(origin);
  cli.set_connection_timeout(5);
  cli.set_read_timeout(600);
  if (!stream) {
    auto r = cli.Post(target.c_str(), headers, body, "application/json");
    HttpResponse res;
    if (!r) {
      res =
          json_http_response(502, error_json("the fallback endpoint " + url + " did not answer (" +
                                             httplib::to_string(r.error()) + ")"));
    } else {
      const std::string type = r->get_header_value("Content-Type");
      res.status = r->status;
      res.content_type = type.empty() ? "application/json" : type;
      res.body = r->body;
    }
    res.set_header("X-Hearth-Fallback", reason);
    return ex.send(std::move(res));
  }
  // Streaming: the status line is already 200 by the time the remote answers, so a remote
  // failure is reported as an error event in the stream (what OpenAI clients look for).
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.set_header("Cache-Control", "no-cache");
  head.set_header("X-Hearth-Fallback", reason);
  ex.begin_stream(std::move(head), StreamOptions{});
  int status = 0;
  std::string error_body;
  httplib::Request fwd;
  fwd.method = "POST";
  fwd.path = target;
  fwd.headers = headers;
  fwd.headers.emplace("Content-Type", "application/json");
  fwd.body = body;
  fwd.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  fwd.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return error_body.size() < (1 << 20);
    }
    ex.write(std::string(data, n));
    return !ex.gone();
  };
  auto r = cli.send(fwd);
  if (!r || status != 200) {
    std::string msg = !r ? error_json("the fallback endpoint " + url + " did not answer (" +
                                      httplib::to_string(r.error()) + ")")
                         : error_body;
    // One SSE data line: re-serialize JSON compactly, or wrap whatever else came back.
    const auto parsed = nlohmann::json::parse(msg, nullptr, false);
    msg = parsed.is_discarded()
              ? error_json("the fallback endpoint answered HTTP " + std::to_string(status))
              : parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    ex.write("data: " + msg + "\n\ndata: [DONE]\n\n");
  }
  ex.end();
}
}  // namespace

void Fallback::forward(std::string body, std::shared_ptr<HttpExchange> ex, const std::string& path,
                       bool stream, const std::string& reason) const {
  if (running_->fetch_add(1) >= kMaxForwards) {
    running_->fetch_sub(1);
    HttpResponse r = json_http_response(
        503, error_json("the fallback endpoint already has " + std::to_string(kMaxForwards) +
                        " requests in flight; retry later"));
    r.set_header("Retry-After", "1");
    return ex->send(std::move(r));
  }
  httplib::Headers headers;
  if (!key_.empty()) headers.emplace("Authorization", "Bearer " + key_);
  std::thread([origin = origin_, url = url_, target = base_path_ + path, headers,
               body = std::move(body), stream, reason, ex = std::move(ex), running = running_] {
    relay(origin, url, target, headers, body, stream, reason, *ex);
    running->fetch_sub(1);
  }).detach();
}

}  // namespace hearth::server
