// libcurl, opened with dlopen at the first HTTP request rather than linked: linked, it brought
// ~25 libraries (TLS, Kerberos, LDAP, SSH, IDN...) into every `hearth` process, a good part of
// exec -> main for runs that never touch the network. A new libcurl function: add it to the list.
#pragma once

#include <curl/curl.h>

namespace hearth::hub {

#define HEARTH_CURL_FUNCTIONS(X) \
  X(curl_global_init)            \
  X(curl_easy_init)              \
  X(curl_easy_setopt)            \
  X(curl_easy_perform)           \
  X(curl_easy_getinfo)           \
  X(curl_easy_cleanup)           \
  X(curl_easy_strerror)          \
  X(curl_slist_append)           \
  X(curl_slist_free_all)         \
  X(curl_free) X(curl_url) X(curl_url_set) X(curl_url_get) X(curl_url_cleanup)

// The functions, typed by the installed curl.h, under their own names.
struct CurlApi {
#define HEARTH_CURL_POINTER(name) decltype(&::name) name = nullptr;
  HEARTH_CURL_FUNCTIONS(HEARTH_CURL_POINTER)
#undef HEARTH_CURL_POINTER
};

// libcurl.so.4's functions, looked up once per process (curl_global_init already called), or
// null when it cannot be loaded.
const CurlApi* curl_api();

}  // namespace hearth::hub
