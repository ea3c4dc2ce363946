// The HTTP layer's vocabulary, shared by the connection code (http-connection.cpp) and the
// routes (http-server.cpp): a parsed request, a response, and the exchange a handler answers on.
// A new header rule belongs in http-policy.cpp; a new route in http-server.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::server {

struct HttpRequest {
  std::string method;      // as sent ("GET", "POST", ...)
  std::string target;      // the request target as sent ("/v1/models?x=1")
  std::string path;        // target without the query, percent-decoded (may hold any bytes)
  int version = 11;        // 10 or 11
  bool keep_alive = true;  // what the request's version and Connection header ask for
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;
  std::string remote_addr;

  // The first value of a header (name lower-case), or nullptr.
  const std::string* header(std::string_view lower_name) const;
  std::string header_value(std::string_view lower_name) const;
  size_t header_count(std::string_view lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // "" -> no Content-Type
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // never request bytes
  bool close = false;                                        // Connection: close after this

  void set_header(std::string name, std::string value);
};

// A complete JSON answer (the body already serialized).
HttpResponse json_http_response(int status, std::string body,
                                std::string content_type = "application/json");

// How a streamed body keeps an idle connection alive: `idle_text` is written whenever nothing
// was written for `idle_interval` (SSE comment lines), so a gone client shows up as a write error.
struct StreamOptions {
  std::string idle_text;
  std::chrono::milliseconds idle_interval{250};
};

// One request's answer channel. Every method may be called from any thread; the connection
// serializes them with its own I/O. A handler answers with send() once, or with begin_stream(),
// any number of write()s and end(). Dropping the last reference without answering sends a 500.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void send(HttpResponse response) = 0;
  virtual void begin_stream(HttpResponse head, StreamOptions options) = 0;
  virtual void write(std::string data) = 0;
  virtual void end() = 0;
  // Runs fn on the connection's executor, after the writes queued before it.
  virtual void post(std::function<void()> fn) = 0;
  // The client has gone (reset, or closed and unreachable by writes): stop producing.
  virtual bool gone() const = 0;
  // fn runs once, on the connection's executor, when the client is found gone (or at once).
  virtual void on_gone(std::function<void()> fn) = 0;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;

// The reason phrase of a status code ("Not Found"); "" for codes it does not know.
const char* http_reason(int status);

}  // namespace hearth::server
