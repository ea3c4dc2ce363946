// The CUDA code's A/B switches from the environment (HEARTH_CUDA_*), read once by each caller
// into a static: env_on (on unless "0"), env_is (exactly this value), env_int (a number, or the
// fallback when unset or empty).
#pragma once

#include <cstdlib>
#include <cstring>

namespace hearth::cuda {

inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, value) == 0;
}
inline bool env_on(const char* name) {
  return !env_is(name, "0");
}
inline int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::atoi(e) : fallback;
}

}  // namespace hearth::cuda
