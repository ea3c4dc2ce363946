// The hybrid path: a request the local model cannot take (queue full, prompt too long) is sent
// to a remote OpenAI-compatible endpoint and its answer relayed, marked X-Hearth-Fallback.
// Other reasons to forward only need a new reason string at the call site.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace hearth::server {

class Fallback {
 public:
  // url: the remote API base, e.g. http://127.0.0.1:9000/v1 or https://api.example.com/v1.
  static Result<std::unique_ptr<Fallback>> create(const std::string& url, const std::string& key);

  // Forwards req's body to base + path (e.g. "/chat/completions"). Streaming requests relay the
  // remote's event stream chunk by chunk; others copy status and body.
  void forward(const httplib::Request& req, httplib::Response& res, const std::string& path,
               bool stream, const std::string& reason) const;

  const std::string& url() const { return url_; }

 private:
  std::string url_, origin_, base_path_, key_;
};

}  // namespace hearth::server
