// Bytes -> HttpRequest, one request at a time, on Boost.Beast's parser with hard limits. No
// socket: the connection feeds what it read, the fuzz target feeds arbitrary bytes. A new
// request rule that needs only the bytes (framing, target form) goes in finish().
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "http-message.h"

namespace hearth::server {

struct RequestLimits {
  size_t header_bytes = 16 << 10;  // request line + headers
  size_t body_bytes = 8u << 20;
};

class RequestReader {
 public:
  explicit RequestReader(RequestLimits limits);
  ~RequestReader();

  enum class State { kNeedMore, kDone, kError };
  // Feeds bytes; returns how many it consumed (the rest belongs to the next request, or is
  // needed again with more bytes appended). After kDone take() the request; after kError
  // error() says why, as an HTTP status and a one-line message.
  size_t feed(std::string_view bytes);
  // The peer closed its side: a request cut short becomes an error.
  void feed_eof();
  State state() const { return state_; }
  // True once the head is complete (the body may still be arriving).
  bool head_done() const;
  // True when the client waits for "100 Continue" before sending its body.
  bool expects_continue() const;
  // Whether bytes of the current request have arrived (false: between requests).
  bool started() const { return started_; }

  HttpRequest take();
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }

  // Ready for the next request on the same connection.
  void reset();

 private:
  void fail(int status, std::string message);
  void finish();

  struct Parser;
  RequestLimits limits_;
  std::unique_ptr<Parser> parser_;
  State state_ = State::kNeedMore;
  bool started_ = false;
  HttpRequest request_;
  int error_status_ = 400;
  std::string error_;
};

// Decodes %XX escapes; false when an escape is malformed.
bool percent_decode(std::string_view in, std::string* out);

}  // namespace hearth::server
