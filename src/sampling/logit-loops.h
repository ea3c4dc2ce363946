// The sampler's whole-vocabulary passes (clean copy, max, finite min, exp weights), written as
// fixed-width blocks so the compiler vectorises them (GCC's -O2 cost model only vectorises loops
// whose trip count is a multiple of the vector width), in logit-loops.cpp: there each is built
// for AVX-512, AVX2 and the baseline and the loader picks one for the CPU it runs on. A new O(V)
// pass goes there in the same shape: a kBlock-wide inner loop over a fixed-size accumulator, a
// scalar tail.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace hearth::sampling {

inline constexpr int64_t kBlock = 16;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Bitwise select, mask all ones or all zeros: the compiler turns it into vector and/or where a
// ternary on floats would stay a branch.
inline float select_bits(uint32_t mask, float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, sizeof ua);
  std::memcpy(&ub, &b, sizeof ub);
  const uint32_t r = (ua & mask) | (ub & ~mask);
  float out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

// exp(x) for x <= 0 in float (Cephes' range reduction and polynomial, about 1 ulp), branch-free so
// the loops over it vectorise; exactly 0 below -87 (and for -inf), where float exp is denormal.
inline float exp_nonpositive(float x) {
  const uint32_t in_range = 0u - uint32_t(x >= -87.0f);
  const float xc = select_bits(in_range, x, -87.0f);
  const float nf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  float r = xc - nf * 0.693359375f;  // ln 2 in two parts: x - n ln 2 without cancellation
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = uint32_t(int32_t(nf) + 127) << 23;  // 2^n, n >= -126 after the clamp
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return select_bits(in_range, p * scale, 0.0f);
}

// out[i] = in[i], NaN replaced by -inf (a NaN logit is an impossible token, as in
// greedy_argmax); returns the largest out[i] (-inf for n == 0).
float copy_clean_max(const float* __restrict in, float* __restrict out, int64_t n);
// Largest value (no NaN in x); -inf for n == 0.
float max_value(const float* x, int64_t n);
// Smallest value that is not -inf (no NaN in x); +inf when there is none.
float min_finite_value(const float* x, int64_t n);
// w[i] = exp(x[i] / t - m / t) (the softmax numerators at temperature t, the max m scaled the
// same way so the largest is exactly 1); returns their sum, in double so a
// 150k-entry vocabulary loses nothing to the order of the additions.
double exp_weights(const float* __restrict x, int64_t n, float m, float t, float* __restrict w);

}  // namespace hearth::sampling
