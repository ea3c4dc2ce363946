// `hearth serve`'s HTTP/1.1 connection layer on Boost.Asio: accepts, reads requests with
// RequestReader under deadlines, answers them in order (pipelining), streams bodies without a
// thread per client, and bounds what any one client can hold. Routes live in http-server.cpp.
//
// Why not cpp-httplib (measured; docs/architecture.md, "The server on a hostile network"): its
// thread per connection with a read timeout that every byte resets let ~85 one-byte-a-second
// clients hold every thread; 200 of them plus 200 idle keep-alives made a 0.4 s completion time out
// after 30 s. Here a waiting socket costs a few hundred bytes, a request head has a deadline that
// bytes do not extend, and a full server closes the oldest connection that is not in a request
// instead of refusing new ones.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "http-message.h"
#include "http-request-reader.h"

namespace hearth::server {

struct ConnectionLimits {
  std::chrono::milliseconds head_timeout{10000};  // first byte -> end of the request head
  std::chrono::milliseconds body_timeout{30000};  // end of the head -> end of the body
  std::chrono::milliseconds idle_timeout{5000};   // keep-alive wait for the next request
  // At either limit a new connection closes the longest-waiting connection that is between or
  // inside a request head (never one being answered); with none, the new one is refused.
  size_t max_connections = 1024;
  size_t max_connections_per_ip = 256;
  size_t max_unsent_bytes = 8u << 20;  // a client that does not read its answer is dropped
  RequestLimits request;
  int io_threads = 4;  // handlers (JSON, tokenizing a long prompt) run on these too
  int listen_backlog = 4096;
  // At stop, how long answers already produced may take to reach their clients.
  std::chrono::milliseconds stop_flush{2000};
};

class HttpListener {
 public:
  HttpListener(ConnectionLimits limits, HttpHandler handler);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;

  // Binds host:port (port 0: any free port). Also raises the open-file limit to its maximum.
  Status bind(const std::string& host, int port);
  int port() const;
  // Serves on limits.io_threads threads (the caller's included) until stop().
  void run();
  // Stops accepting and closes every connection; run() returns. Any thread.
  void stop();
  size_t open_connections() const;

  struct Impl;  // public so the connections (http-connection.cpp) can name their owner

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace hearth::server
