// `hearth serve`'s HTTP front: OpenAI routes, /health, /metrics and the chat page over the
// continuous-batching scheduler, with the safety checks (bind rules, API key, Host and Origin
// policy, connection and size limits) and graceful drain. A new route goes in
// Server::Impl::routes() (http-server.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "http-connection.h"
#include "openai-api.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"

namespace hearth::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (see Server::port())
  std::string api_key;  // required when host is not a loopback address
  std::string fallback_url, fallback_key;
  size_t max_body_bytes = 8u << 20;
  int http_threads = 0;  // threads of the HTTP event loop; 0: connections.io_threads
  // Host names besides localhost, 127.0.0.1, ::1 and the bind address (DNS-rebinding check).
  std::vector<std::string> allowed_hosts;
  // Origins whose pages may call the API (CORS); "*" for any. Others get 403.
  std::vector<std::string> cors_origins;
  ConnectionLimits connections;
  SchedulerOptions scheduler;
  ApiConfig api;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

class Server {
 public:
  Server(std::shared_ptr<const Engine> engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;

  // Checks the options, starts the scheduler and binds the socket (not yet accepting).
  Status start();
  int port() const;
  // The scheduler's counters (the KV pool's size once started), as /metrics reports them.
  SchedulerStats scheduler_stats() const;
  // Accepts and answers requests until shutdown() is called (from another thread).
  Status serve();
  // Graceful drain: refuse new work (503), let running and queued requests finish for at most
  // `drain`, then stop listening. Safe to call from a signal-waiting thread.
  void shutdown(std::chrono::milliseconds drain);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth::server
