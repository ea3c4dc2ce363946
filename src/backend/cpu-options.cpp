// CpuOptions' names and checks (backend/cpu-options.h): what the CLI parses and the loader
// checks before a CPU backend is made.
#include "backend/cpu-options.h"

#include <utility>

namespace hearth {

namespace {

constexpr std::pair<CacheVerify::Mode, const char*> kCacheVerifyNames[] = {
    {CacheVerify::Mode::kLazy, "lazy"},
    {CacheVerify::Mode::kSample, "sample"},
    {CacheVerify::Mode::kFull, "full"},
};

}  // namespace

const char* cache_verify_name(CacheVerify::Mode mode) {
  for (const auto& [m, name] : kCacheVerifyNames)
    if (m == mode) return name;
  return "?";
}

std::optional<CacheVerify::Mode> parse_cache_verify(std::string_view name) {
  for (const auto& [m, n] : kCacheVerifyNames)
    if (name == n) return m;
  return std::nullopt;
}

std::string cpu_options_error(const CpuOptions& o) {
  if (o.amx.min_tokens < 0)
    return "amx min tokens " + std::to_string(o.amx.min_tokens) +
           " is negative (0 keeps the measured threshold)";
  if (!parse_cache_verify(cache_verify_name(o.cache_verify)))
    return "cache verify mode " + std::to_string(int(o.cache_verify)) +
           " is not one of lazy|sample|full";
  return "";
}

}  // namespace hearth
