// Header lookups and reason phrases for http-message.h.
#include "http-message.h"

namespace hearth::server {

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

std::string HttpRequest::header_value(std::string_view lower_name) const {
  const std::string* v = header(lower_name);
  return v ? *v : std::string();
}

size_t HttpRequest::header_count(std::string_view lower_name) const {
  size_t n = 0;
  for (const auto& h : headers) n += h.first == lower_name;
  return n;
}

HttpResponse json_http_response(int status, std::string body, std::string content_type) {
  HttpResponse r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  return r;
}

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& h : headers)
    if (h.first == name) {
      h.second = std::move(value);
      return;
    }
  headers.emplace_back(std::move(name), std::move(value));
}

const char* http_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    default:
      return "";
  }
}

}  // namespace hearth::server
