// The hybrid path: a request the local model cannot take (queue full, prompt too long) is sent
// to a remote OpenAI-compatible endpoint and its answer relayed, marked X-Hearth-Fallback.
// Other reasons to forward only need a new reason string at the call site.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "base/status.h"
#include "http-message.h"

namespace hearth::server {

class Fallback {
 public:
  // url: the remote API base, e.g. http://127.0.0.1:9000/v1 or https://api.example.com/v1.
  static Result<std::unique_ptr<Fallback>> create(const std::string& url, const std::string& key);

  // Forwards `body` to base + path (e.g. "/chat/completions") on a thread of its own (the
  // client is blocking; at most kMaxForwards at once) and answers on `ex`. Streaming requests
  // relay the remote's event stream chunk by chunk; others copy status and body.
  void forward(std::string body, std::shared_ptr<HttpExchange> ex, const std::string& path,
               bool stream, const std::string& reason) const;
  static constexpr int kMaxForwards = 64;

  const std::string& url() const { return url_; }

 private:
  std::string url_, origin_, base_path_, key_;
  std::shared_ptr<std::atomic<int>> running_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace hearth::server
