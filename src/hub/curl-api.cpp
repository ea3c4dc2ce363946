// curl-api.h: dlopen of libcurl.so.4 and the lookups, once.
#include "hub/curl-api.h"

#include <dlfcn.h>

#include <mutex>

namespace hearth::hub {
namespace {

CurlApi g_api;
bool g_loaded = false;

void open_library() {
  // Never closed: libcurl keeps global state for the process.
  void* lib = dlopen("libcurl.so.4", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return;
  CurlApi api;
#define HEARTH_CURL_LOOKUP(name)                                     \
  api.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name)); \
  if (!api.name) return;
  HEARTH_CURL_FUNCTIONS(HEARTH_CURL_LOOKUP)
#undef HEARTH_CURL_LOOKUP
  if (api.curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return;
  g_api = api;
  g_loaded = true;
}

}  // namespace

const CurlApi* curl_api() {
  static std::once_flag once;
  std::call_once(once, open_library);
  return g_loaded ? &g_api : nullptr;
}

}  // namespace hearth::hub
