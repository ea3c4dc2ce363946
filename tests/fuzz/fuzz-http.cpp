// libFuzzer entry point for `hearth serve`'s request path without a socket: bytes -> the
// RequestReader (fed in input-chosen pieces, pipelined requests included) -> the Host/Origin/CORS
// policy -> the JSON body parser -> the error document a 404 would carry. The contract: no
// crash, errors are 400/413/431 with a one-line message, every request has a '/' path, and
// every message serializes (request bytes in it may be any bytes).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http-policy.h"
#include "http-request-reader.h"
#include "json-body.h"

using namespace hearth::server;

namespace {
void check_request(const HttpRequest& r, const OriginPolicy& policy) {
  if (r.path.empty() || r.target.empty() || r.target[0] != '/') __builtin_trap();
  (void)host_allowed(policy, r);
  (void)check_origin(policy, r);
  (void)is_json_content_type(r.header_value("content-type"));
  if (is_preflight(r)) (void)preflight_response(r);
  nlohmann::json body;
  std::string why;
  if (!parse_json_object(r.body, JsonLimits{}, &body, &why) &&
      (why.empty() || why.find('\n') != std::string::npos))
    __builtin_trap();
  // What the 404 handler writes: the decoded path inside a JSON string.
  const nlohmann::json err = {
      {"error", {{"message", "Unknown request URL: " + r.method + " " + r.path}}}};
  if (err.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).empty()) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const OriginPolicy policy =
      make_origin_policy("127.0.0.1", {"hearth.lan"}, {"http://app.example:3000"});
  // The first byte picks the piece size (1..256), so head and body boundaries land anywhere.
  const size_t piece = size_t(data[0]) + 1;
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  RequestReader reader(RequestLimits{1024, 4096});
  std::string pending;
  for (size_t pos = 0; pos < in.size() || !pending.empty();) {
    if (pos < in.size()) {
      const size_t n = std::min(piece, in.size() - pos);
      pending.append(in.substr(pos, n));
      pos += n;
    }
    const size_t used = reader.feed(pending);
    if (used > pending.size()) __builtin_trap();
    pending.erase(0, used);
    if (reader.state() == RequestReader::State::kError) {
      const int s = reader.error_status();
      if ((s != 400 && s != 413 && s != 431) || reader.error().empty() ||
          reader.error().find('\n') != std::string::npos)
        __builtin_trap();
      return 0;
    }
    if (reader.state() == RequestReader::State::kDone) {
      check_request(reader.take(), policy);
      reader.reset();
      continue;  // the next pipelined request may already be in `pending`
    }
    if (pos >= in.size()) break;  // needs bytes that will not come
  }
  reader.feed_eof();
  return 0;
}
