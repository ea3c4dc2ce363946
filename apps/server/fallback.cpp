// Fallback forwarding with cpp-httplib's client. Each forward opens its own connection, so a
// slow remote never blocks other requests; timeouts bound a dead one.
#include "fallback.h"

#include <nlohmann/json.hpp>

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
}  // namespace

void Fallback::forward(const httplib::Request& req, httplib::Response& res, const std::string& path,
                       bool stream, const std::string& reason) const {
  res.set_header("X-Hearth-Fallback", reason);
  httplib::Headers headers;
  if (!key_.empty()) headers.emplace("Authorization", "Bearer " + key_);
  const std::string target = base_path_ + path;
  if (!stream) {
    httplib::Client cli(origin_);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(600);
    auto r = cli.Post(target.c_str(), headers, req.body, "application/json");
    if (!r) {
      res.status = 502;
      res.set_content(error_json("the fallback endpoint " + url_ + " did not answer (" +
                                 httplib::to_string(r.error()) + ")"),
                      "application/json");
      return;
    }
    res.status = r->status;
    res.set_content(r->body, r->get_header_value("Content-Type").empty()
                                 ? "application/json"
                                 : r->get_header_value("Content-Type"));
    return;
  }
  // Streaming: the status line is already 200 by the time the remote answers, so a remote
  // failure is reported as an error event in the stream (what OpenAI clients look for).
  res.set_header("Cache-Control", "no-cache");
  auto origin = origin_, url = url_;
  auto body = req.body;
  res.set_chunked_content_provider(
      "text/event-stream", [origin, url, target, headers, body](size_t, httplib::DataSink& sink) {
        httplib::Client cli(origin);
        cli.set_connection_timeout(5);
        cli.set_read_timeout(600);
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
          return sink.write(data, n);
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
          const std::string event = "data: " + msg + "\n\ndata: [DONE]\n\n";
          sink.write(event.data(), event.size());
        }
        sink.done();
        return true;
      });
}

}  // namespace hearth::server
