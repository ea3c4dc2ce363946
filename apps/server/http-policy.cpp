// Host, Origin, CORS and content-type rules (see http-policy.h). Names compare exactly
// (case-insensitively): "127.0.0.1.evil.com" and "localhost." are other names.
#include "http-policy.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace hearth::server {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

bool valid_port(const std::string& p) {
  if (p.empty() || p.size() > 5) return false;
  for (char c : p)
    if (c < '0' || c > '9') return false;
  return std::stoi(p) <= 65535;
}

void add_unique(std::vector<std::string>& v, std::string s) {
  if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(std::move(s));
}

std::string strip_brackets(const std::string& h) {
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') return h.substr(1, h.size() - 2);
  return h;
}

// The machine's own addresses and host name, which clients of a wildcard bind send as Host.
void add_local_names(std::vector<std::string>& hosts) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) add_unique(hosts, lower(name));
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    else if (i->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, text,
                sizeof text);
    else
      continue;
    std::string t = text;
    if (t.find('%') != std::string::npos) continue;  // link-local with a zone: not a Host value
    add_unique(hosts, lower(t));
  }
  freeifaddrs(list);
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

OriginPolicy make_origin_policy(const std::string& bind_host,
                                const std::vector<std::string>& allowed_hosts,
                                const std::vector<std::string>& cors_origins) {
  OriginPolicy p;
  for (const char* h : {"localhost", "127.0.0.1", "::1"}) add_unique(p.hosts, h);
  const std::string bind = lower(strip_brackets(bind_host));
  if (bind == "0.0.0.0" || bind == "::")
    add_local_names(p.hosts);
  else
    add_unique(p.hosts, bind);
  for (const auto& h : allowed_hosts) add_unique(p.hosts, lower(strip_brackets(h)));
  for (const auto& o : cors_origins) add_unique(p.cors_origins, lower(o));
  return p;
}

std::optional<std::string> host_name_of(const std::string& header) {
  const std::string h = trim(header);
  if (h.empty()) return std::nullopt;
  std::string name, port;
  if (h[0] == '[') {
    const size_t close = h.find(']');
    if (close == std::string::npos) return std::nullopt;
    name = h.substr(1, close - 1);
    const std::string rest = h.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':' || !valid_port(rest.substr(1))) return std::nullopt;
    }
  } else {
    const size_t colon = h.find(':');
    name = h.substr(0, colon);
    if (colon != std::string::npos && !valid_port(h.substr(colon + 1))) return std::nullopt;
  }
  if (name.empty()) return std::nullopt;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
          c == '_'))
      return std::nullopt;
  return lower(name);
}

bool host_allowed(const OriginPolicy& policy, const HttpRequest& req) {
  const std::string* host = req.header("host");
  if (!host) return req.version < 11;
  const auto name = host_name_of(*host);
  return name && contains(policy.hosts, *name);
}

OriginVerdict check_origin(const OriginPolicy& policy, const HttpRequest& req) {
  const std::string* origin = req.header("origin");
  if (!origin) return OriginVerdict::kNone;
  const std::string o = lower(trim(*origin));
  const std::string host = lower(trim(req.header_value("host")));
  if (!host.empty() && (o == "http://" + host || o == "https://" + host))
    return OriginVerdict::kSameOrigin;
  if (o != "null" && (contains(policy.cors_origins, o) || contains(policy.cors_origins, "*")))
    return OriginVerdict::kCorsAllowed;
  return OriginVerdict::kForeign;
}

bool is_json_content_type(const std::string& value) {
  const std::string v = lower(trim(value.substr(0, value.find(';'))));
  return v == "application/json";
}

bool is_preflight(const HttpRequest& req) {
  return req.method == "OPTIONS" && req.header("origin") &&
         req.header("access-control-request-method");
}

HttpResponse preflight_response(const HttpRequest& req) {
  HttpResponse r;
  r.status = 204;
  r.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  // Only the headers the API reads; anything else a page asks for is not granted.
  r.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
  r.set_header("Access-Control-Max-Age", "600");
  (void)req;
  return r;
}

namespace {
class CorsExchange : public HttpExchange {
 public:
  CorsExchange(std::shared_ptr<HttpExchange> inner, std::string origin)
      : inner_(std::move(inner)), origin_(std::move(origin)) {}
  void send(HttpResponse r) override { inner_->send(decorate(std::move(r))); }
  void begin_stream(HttpResponse head, StreamOptions o) override {
    inner_->begin_stream(decorate(std::move(head)), std::move(o));
  }
  void write(std::string d) override { inner_->write(std::move(d)); }
  void end() override { inner_->end(); }
  void post(std::function<void()> fn) override { inner_->post(std::move(fn)); }
  bool gone() const override { return inner_->gone(); }
  void on_gone(std::function<void()> fn) override { inner_->on_gone(std::move(fn)); }

 private:
  HttpResponse decorate(HttpResponse r) const {
    r.set_header("Access-Control-Allow-Origin", origin_);
    r.set_header("Vary", "Origin");
    r.set_header("Access-Control-Expose-Headers", "X-Hearth-Fallback, Retry-After");
    return r;
  }
  std::shared_ptr<HttpExchange> inner_;
  std::string origin_;
};
}  // namespace

std::shared_ptr<HttpExchange> with_cors(std::shared_ptr<HttpExchange> inner, std::string origin) {
  return std::make_shared<CorsExchange>(std::move(inner), std::move(origin));
}

}  // namespace hearth::server
