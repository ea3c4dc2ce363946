// One HTTP request over libcurl, reduced to what the Hub client needs: status, headers of the
// final response, the body (into a string or appended to a file) and a transport verdict that
// tells retryable drops from hard failures. New request kinds add fields to HttpRequest.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace hearth::hub {

struct HttpRequest {
  std::string url;
  bool head = false;              // HEAD instead of GET
  bool follow_redirects = false;  // GET of file bytes follows; metadata HEAD reads the 3xx itself
  std::string token;              // sent as "Authorization: Bearer ..." (never to another host)
  uint64_t range_start = 0;       // > 0: ask for bytes [range_start, end) with a Range header
  int body_fd = -1;               // GET: append a 2xx body to this file; else keep it in `body`
  uint64_t max_text_bytes = 32u << 20;  // cap for bodies kept in memory
  long connect_timeout_s = 15;
  long stall_timeout_s = 60;  // abort when under 1 byte/s for this long
  // Called as body bytes land in body_fd with the running count for this transfer.
  std::function<void(uint64_t)> on_bytes;
};

enum class Transport {
  kOk,           // a complete HTTP response arrived (any status)
  kUnreachable,  // DNS, connect refused, TLS: no network or wrong endpoint
  kDropped,      // connection lost or stalled mid-response: retry / resume
  kWriteFailed,  // writing the body to disk failed (write_errno says why)
  kOther,        // anything else libcurl reports
};

struct HttpResponse {
  Transport transport = Transport::kOther;
  std::string transport_error;  // libcurl's message when transport != kOk
  int write_errno = 0;
  long status = 0;
  std::map<std::string, std::string> headers;  // final response, lower-case names
  std::string body;                            // when not written to body_fd (or an error body)
  std::string effective_url;
  uint64_t file_bytes = 0;      // bytes appended to body_fd by this request
  bool range_ignored = false;   // asked for a range, got 200: body_fd was truncated to 0 first
  bool range_mismatch = false;  // 206 that starts elsewhere than asked: nothing was written

  std::string header(const std::string& lower_name) const;
};

HttpResponse http_perform(const HttpRequest& request);

// Resolves a (possibly relative) Location against the URL it came from.
std::string resolve_url(const std::string& base, const std::string& location);

// True when both URLs have the same scheme, host and port: the token is only sent to the hub
// itself, never to the CDN its redirects point at (those URLs carry their own signature).
bool same_origin(const std::string& a, const std::string& b);

// Percent-encodes a path segment list, keeping '/' when keep_slash.
std::string url_encode(const std::string& text, bool keep_slash);

}  // namespace hearth::hub
