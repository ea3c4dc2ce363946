// CpuOptions' names and checks (backend/cpu-options.h): what the CLI parses and the loader
// checks before a CPU backend is made.
#include "backend/cpu-options.h"

#include <cstddef>
#include <utility>

namespace hearth {

namespace {

constexpr std::pair<CacheVerify::Mode, const char*> kCacheVerifyNames[] = {
    {CacheVerify::Mode::kLazy, "lazy"},
    {CacheVerify::Mode::kSample, "sample"},
    {CacheVerify::Mode::kFull, "full"},
};

constexpr std::pair<CpuOptions::Lanes, const char*> kLanesNames[] = {
    {CpuOptions::Lanes::kAuto, "auto"},
    {CpuOptions::Lanes::kOn, "on"},
    {CpuOptions::Lanes::kOff, "off"},
};

template <typename E, size_t N>
const char* name_in(const std::pair<E, const char*> (&names)[N], E value) {
  for (const auto& [v, name] : names)
    if (v == value) return name;
  return "?";
}

template <typename E, size_t N>
std::optional<E> value_in(const std::pair<E, const char*> (&names)[N], std::string_view name) {
  for (const auto& [v, n] : names)
    if (name == n) return v;
  return std::nullopt;
}

}  // namespace

const char* cache_verify_name(CacheVerify::Mode mode) {
  return name_in(kCacheVerifyNames, mode);
}
std::optional<CacheVerify::Mode> parse_cache_verify(std::string_view name) {
  return value_in(kCacheVerifyNames, name);
}
const char* lanes_name(CpuOptions::Lanes lanes) {
  return name_in(kLanesNames, lanes);
}
std::optional<CpuOptions::Lanes> parse_lanes(std::string_view name) {
  return value_in(kLanesNames, name);
}

std::string cpu_options_error(const CpuOptions& o) {
  if (o.amx.min_tokens < 0)
    return "amx min tokens " + std::to_string(o.amx.min_tokens) +
           " is negative (0 keeps the measured threshold)";
  if (!parse_cache_verify(cache_verify_name(o.cache_verify)))
    return "cache verify mode " + std::to_string(int(o.cache_verify)) +
           " is not one of lazy|sample|full";
  if (!parse_lanes(lanes_name(o.decode_lanes)))
    return "decode lanes mode " + std::to_string(int(o.decode_lanes)) +
           " is not one of auto|on|off";
  return "";
}

}  // namespace hearth
