// RequestReader on beast::http::request_parser. Beast already refuses what request smuggling
// needs (Content-Length with Transfer-Encoding, duplicate or bad lengths, bare LF line ends,
// obsolete line folding); this file adds the rules Beast leaves to the server: a
// Transfer-Encoding other than chunked, several Host headers, a target that is not a path.
#include "http-request-reader.h"

#include <boost/beast/http.hpp>
#include <cctype>

namespace hearth::server {

namespace http = boost::beast::http;

struct RequestReader::Parser {
  http::request_parser<http::string_body> p;
};

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

bool percent_decode(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(char(hi * 16 + lo));
    i += 2;
  }
  return true;
}

RequestReader::RequestReader(RequestLimits limits) : limits_(limits) {
  reset();
}
RequestReader::~RequestReader() = default;

void RequestReader::reset() {
  parser_ = std::make_unique<Parser>();
  parser_->p.header_limit(std::uint32_t(limits_.header_bytes));
  parser_->p.body_limit(std::uint64_t(limits_.body_bytes));
  parser_->p.eager(true);
  state_ = State::kNeedMore;
  started_ = false;
  request_ = HttpRequest{};
  error_.clear();
  error_status_ = 400;
}

bool RequestReader::head_done() const {
  return parser_->p.is_header_done();
}

bool RequestReader::expects_continue() const {
  if (!head_done()) return false;
  const auto& m = parser_->p.get();
  if (m.version() != 11) return false;
  const auto it = m.find(http::field::expect);
  return it != m.end() && boost::beast::iequals(it->value(), "100-continue");
}

void RequestReader::fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_ = std::move(message);
}

size_t RequestReader::feed(std::string_view bytes) {
  if (state_ != State::kNeedMore || bytes.empty()) return 0;
  // Blank lines before a request line are allowed (RFC 9112 2.2) and carry no request.
  size_t skipped = 0;
  if (!started_) {
    while (skipped < bytes.size() && (bytes[skipped] == '\r' || bytes[skipped] == '\n')) ++skipped;
    if (skipped == bytes.size()) return skipped;
    started_ = true;
  }
  size_t used = skipped;
  while (used < bytes.size() && state_ == State::kNeedMore) {
    boost::system::error_code ec;
    const size_t n =
        parser_->p.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) break;
    if (ec == http::error::body_limit)
      return fail(413, "the request body is larger than " + std::to_string(limits_.body_bytes) +
                           " bytes"),
             used;
    if (ec == http::error::header_limit)
      return fail(431, "the request head is larger than " + std::to_string(limits_.header_bytes) +
                           " bytes"),
             used;
    if (ec) return fail(400, "malformed HTTP request (" + ec.message() + ")"), used;
    if (parser_->p.is_done()) finish();
    if (n == 0) break;
  }
  return used;
}

void RequestReader::feed_eof() {
  if (state_ != State::kNeedMore || !started_) return;
  fail(400, "the connection closed in the middle of a request");
}

void RequestReader::finish() {
  auto& m = parser_->p.get();
  HttpRequest& r = request_;
  r.method = std::string(m.method_string());
  r.target = std::string(m.target());
  r.version = int(m.version());
  for (const auto& f : m)
    r.headers.emplace_back(lower(std::string_view(f.name_string().data(), f.name_string().size())),
                           std::string(f.value()));
  r.keep_alive = parser_->p.keep_alive();
  if (r.header_count("host") > 1) return fail(400, "the request has more than one Host header");
  if (r.version >= 11 && r.header_count("host") == 0)
    return fail(400, "an HTTP/1.1 request needs a Host header");
  // Beast frames only a final "chunked"; any other coding would leave the body unframed.
  if (const std::string* te = r.header("transfer-encoding"); te && !parser_->p.chunked())
    return fail(400, "Transfer-Encoding '" + *te + "' is not supported (only chunked)");
  const std::string_view target = r.target;
  if (target.empty() || target[0] != '/')
    return fail(400, "the request target must be a path starting with '/'");
  const std::string_view path = target.substr(0, target.find('?'));
  if (!percent_decode(path, &r.path)) return fail(400, "the request path has a malformed %-escape");
  r.body = std::move(m.body());
  state_ = State::kDone;
}

HttpRequest RequestReader::take() {
  HttpRequest r = std::move(request_);
  request_ = HttpRequest{};
  return r;
}

}  // namespace hearth::server
