// The sampler's whole-vocabulary passes (max, clean copy, finite min, exp weights and sums, the
// band above a floor), in logit-loops.cpp: there each is built for AVX-512, AVX2 and the
// baseline, the loader picking the widest the CPU has, and each works on explicit 16-lane
// vectors (GCC/Clang vector extensions) rather than on loops left to the auto-vectoriser, whose
// -O2 cost model kept the NaN selects and the float-to-double sums scalar (a clean copy of
// 32,000 logits took 16 us that way, the exp sum 25 us). A new O(V) pass goes there in the same
// shape: a 16-lane body over a fixed-size accumulator, a scalar tail computing the same bits.
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

// exp(x) for x <= 0 in float (Cephes' range reduction and polynomial, about 1 ulp), branch-free;
// exactly 0 below -87 (and for -inf), where float exp is denormal. logit-loops.cpp's 16-lane
// form performs the same operations in the same order, so both give the same bits.
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
// Largest value, NaN skipped; -inf for n == 0. *has_nan (when given) says whether x held a NaN.
float max_value(const float* x, int64_t n, bool* has_nan = nullptr);
// Smallest value that is not -inf (no NaN in x); +inf when there is none.
float min_finite_value(const float* x, int64_t n);
// w[i] = exp(x[i] / t - m / t) (the softmax numerators at temperature t, the max m scaled the
// same way so the largest is exactly 1); returns their sum: each of 16 lanes adds 8 of its
// weights in float, then those partial sums in double, so a 150k-entry vocabulary loses nothing
// measurable to the order of the additions (and every CPU adds in the same order).
double exp_weights(const float* __restrict x, int64_t n, float m, float t, float* __restrict w);
// exp_weights' sum without writing the weights (the same bits).
double exp_sum(const float* x, int64_t n, float m, float t);

// The elements with x[i] >= floor (x holds no NaN), in order: their logits, ids (id[i], or i when
// id is null) and, when `weights` is given, exp_weights' weight at (m, t) for each, with the
// weights' sum (added in order, in double) in *mass. Returns how many. A trained model's band is a
// small part of its vocabulary: blocks with nothing in it cost one vector compare.
struct BandOut {
  float* logit;
  int32_t* id;
  float* weight;  // null: no weights
};
int64_t collect_band(const float* x, const int32_t* id, int64_t n, float floor, float m, float t,
                     const BandOut& out, double* mass);

}  // namespace hearth::sampling
