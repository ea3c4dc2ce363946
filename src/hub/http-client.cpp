// libcurl easy-handle wrapper. The write callback decides, on the first body byte, whether the
// server honoured the Range (206 at our offset), ignored it (200: restart the file) or failed
// (keep the small error body in memory), so the temp file only ever holds a valid prefix.
#include "hub/http-client.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "hub/curl-api.h"

namespace hearth::hub {

namespace {

struct TransferState {
  const HttpRequest* req;
  HttpResponse* resp;
  CURL* curl;
  bool decided = false;  // first body byte seen and routed
  bool to_file = false;
  uint64_t offset = 0;  // where the file currently ends
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* st = static_cast<TransferState*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    st->resp->headers.clear();  // a new response in a redirect chain: keep only the final one
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon != std::string::npos)
    st->resp->headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  return size * n;
}

// Parses "bytes START-END/TOTAL" and returns START, or -1.
long long content_range_start(const std::string& value) {
  const char* p = value.c_str();
  if (std::strncmp(p, "bytes ", 6) != 0) return -1;
  p += 6;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(p, &end, 10);
  if (errno || end == p || *end != '-') return -1;
  return v;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* st = static_cast<TransferState*>(user);
  const size_t len = size * n;
  HttpResponse& resp = *st->resp;
  if (!st->decided) {
    st->decided = true;
    long code = 0;
    curl_api()->curl_easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &code);
    st->to_file = st->req->body_fd >= 0 && code >= 200 && code < 300;
    if (st->to_file && st->req->range_start > 0) {
      if (code == 200) {
        // The server ignored Range and sends the whole file: start the temp file over.
        if (::ftruncate(st->req->body_fd, 0) != 0 || ::lseek(st->req->body_fd, 0, SEEK_SET) < 0) {
          resp.write_errno = errno;
          return 0;
        }
        resp.range_ignored = true;
      } else if (code == 206 && content_range_start(resp.header("content-range")) !=
                                    (long long)st->req->range_start) {
        resp.range_mismatch = true;
        return 0;
      }
    }
  }
  if (!st->to_file) {
    if (resp.body.size() + len > st->req->max_text_bytes) return 0;
    resp.body.append(data, len);
    return len;
  }
  size_t done = 0;
  while (done < len) {
    ssize_t w = ::write(st->req->body_fd, data + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      resp.write_errno = w < 0 ? errno : ENOSPC;
      return 0;  // makes libcurl fail with CURLE_WRITE_ERROR
    }
    done += size_t(w);
  }
  resp.file_bytes += len;
  if (st->req->on_bytes) st->req->on_bytes(resp.file_bytes);
  return len;
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

HttpResponse http_perform(const HttpRequest& req) {
  HttpResponse resp;
  const CurlApi* lib = curl_api();
  if (!lib) {
    resp.transport_error = "libcurl (libcurl.so.4) could not be loaded";
    return resp;
  }
  CURL* curl = lib->curl_easy_init();
  if (!curl) {
    resp.transport_error = "libcurl initialisation failed";
    return resp;
  }
  TransferState st{&req, &resp, curl};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  headers = lib->curl_slist_append(headers, "Accept-Encoding: identity");
  std::string auth;
  if (!req.token.empty()) {
    auth = "Authorization: Bearer " + req.token;
    headers = lib->curl_slist_append(headers, auth.c_str());
  }
  lib->curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  lib->curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  lib->curl_easy_setopt(curl, CURLOPT_USERAGENT, "hearth/0.1.0; hf_hub-compatible");
  lib->curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  lib->curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  lib->curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, req.connect_timeout_s);
  lib->curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  lib->curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, req.stall_timeout_s);
  lib->curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  lib->curl_easy_setopt(curl, CURLOPT_HEADERDATA, &st);
  lib->curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  lib->curl_easy_setopt(curl, CURLOPT_WRITEDATA, &st);
  lib->curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, req.follow_redirects ? 1L : 0L);
  lib->curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  lib->curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  lib->curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  if (req.head) lib->curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  std::string range;
  if (req.range_start > 0) {
    range = std::to_string(req.range_start) + "-";
    lib->curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  }

  CURLcode rc = lib->curl_easy_perform(curl);
  lib->curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.status);
  char* eff = nullptr;
  if (lib->curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff)
    resp.effective_url = eff;
  resp.transport_error = errbuf[0] ? errbuf : lib->curl_easy_strerror(rc);
  switch (rc) {
    case CURLE_OK:
      resp.transport = Transport::kOk;
      resp.transport_error.clear();
      break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
      resp.transport = Transport::kUnreachable;
      break;
    case CURLE_WRITE_ERROR:
      // Our callback refused: either the disk failed, a 206 started at the wrong offset, or an
      // in-memory body hit its cap. Only the first is a write failure.
      resp.transport = resp.write_errno ? Transport::kWriteFailed : Transport::kOther;
      if (resp.range_mismatch) resp.transport = Transport::kDropped;
      break;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      resp.transport = Transport::kDropped;
      break;
    default:
      resp.transport = Transport::kOther;
  }
  lib->curl_slist_free_all(headers);
  lib->curl_easy_cleanup(curl);
  return resp;
}

std::string resolve_url(const std::string& base, const std::string& location) {
  const CurlApi* lib = curl_api();
  if (!lib) return location;
  CURLU* u = lib->curl_url();
  std::string out = location;
  if (u && lib->curl_url_set(u, CURLUPART_URL, base.c_str(), 0) == CURLUE_OK &&
      lib->curl_url_set(u, CURLUPART_URL, location.c_str(), 0) == CURLUE_OK) {
    char* full = nullptr;
    if (lib->curl_url_get(u, CURLUPART_URL, &full, 0) == CURLUE_OK && full) {
      out = full;
      lib->curl_free(full);
    }
  }
  if (u) lib->curl_url_cleanup(u);
  return out;
}

bool same_origin(const std::string& a, const std::string& b) {
  const CurlApi* lib = curl_api();
  if (!lib) return false;
  auto origin = [lib](const std::string& url) {
    std::string out;
    CURLU* u = lib->curl_url();
    if (!u) return out;
    if (lib->curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK) {
      for (CURLUPart part : {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT}) {
        char* v = nullptr;
        if (lib->curl_url_get(u, part, &v, CURLU_DEFAULT_PORT) == CURLUE_OK && v) {
          out += std::string(v) + "|";
          lib->curl_free(v);
        }
      }
    }
    lib->curl_url_cleanup(u);
    return out;
  };
  const std::string oa = origin(a);
  return !oa.empty() && oa == origin(b);
}

std::string url_encode(const std::string& text, bool keep_slash) {
  static const char* digits = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += char(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

}  // namespace hearth::hub
