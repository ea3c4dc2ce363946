// Who may talk to `hearth serve`: the Host names it answers to (DNS rebinding), the Origins whose
// pages may call it (CORS), and the body type API routes take. Pure functions of the request, so
// the fuzz target and unit tests reach them without a socket. A new rule: a function here, called
// from Server::Impl::admit() in http-server.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http-message.h"

namespace hearth::server {

struct OriginPolicy {
  std::vector<std::string> hosts;         // lower-case names/addresses, IPv6 without brackets
  std::vector<std::string> cors_origins;  // exact origins ("https://app.example:3000"), or "*"
};

// Loopback names, the bind address, --allowed-host values, and for a wildcard bind (0.0.0.0, ::)
// the machine's own addresses and host name.
OriginPolicy make_origin_policy(const std::string& bind_host,
                                const std::vector<std::string>& allowed_hosts,
                                const std::vector<std::string>& cors_origins);

// The name part of a Host header, lower-cased ("[::1]:8080" -> "::1"); nullopt when the header is
// not host[:port] (junk, a bad port, userinfo).
std::optional<std::string> host_name_of(const std::string& header);

// Host is exactly one of the policy's names (a request without Host is HTTP/1.0 and passes).
bool host_allowed(const OriginPolicy& policy, const HttpRequest& req);

enum class OriginVerdict {
  kNone,         // no Origin header: not a browser's cross-site request
  kSameOrigin,   // the page came from this server (the chat page)
  kCorsAllowed,  // listed with --cors-origin
  kForeign,      // refused
};
OriginVerdict check_origin(const OriginPolicy& policy, const HttpRequest& req);

// "application/json", optionally with parameters ("; charset=utf-8").
bool is_json_content_type(const std::string& value);

// A CORS preflight (OPTIONS with Access-Control-Request-Method) from an allowed origin.
bool is_preflight(const HttpRequest& req);
HttpResponse preflight_response(const HttpRequest& req);

// Adds Access-Control-Allow-Origin (and Vary, exposed headers) to every answer on `inner`.
std::shared_ptr<HttpExchange> with_cors(std::shared_ptr<HttpExchange> inner, std::string origin);

}  // namespace hearth::server
