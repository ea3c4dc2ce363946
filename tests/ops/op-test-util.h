// What the small-op tests share: random inputs, NaN-poisoned outputs with guard values after
// them, and the SmallOps tables this machine runs.
#pragma once

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/small-ops.h"

namespace hearth::kernels::test {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr size_t kGuard = 16;  // floats after every output, which no op may write
constexpr float kGuardValue = -12345.0f;

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// An output buffer poisoned with NaN, followed by guard values.
inline std::vector<float> poisoned(size_t n) {
  std::vector<float> v(n + kGuard, kNaN);
  for (size_t i = n; i < v.size(); ++i) v[i] = kGuardValue;
  return v;
}

inline void expect_guard(const std::vector<float>& v, size_t n, const std::string& what) {
  for (size_t i = n; i < v.size(); ++i) ASSERT_EQ(v[i], kGuardValue) << what << ": wrote past end";
}

inline std::vector<const SmallOps*> tables() {
  int n = 0;
  const SmallOps* const* list = supported_small_ops(&n);
  return {list, list + n};
}

}  // namespace hearth::kernels::test
