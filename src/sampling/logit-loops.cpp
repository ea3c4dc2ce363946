// The sampler's O(V) passes (logit-loops.h), each built three times on x86-64: for AVX-512, AVX2
// and the baseline (SSE2), the dynamic loader picking the widest the CPU has (GCC's
// target_clones). A draw over 32,000 logits (temperature 0.8, top-p 0.95) took 72.7 us with the
// baseline forms and 43.5 us with these (AMD Zen 5), beside kjv-13m's ~1 ms decode step on 2
// cores. Built with -ffp-contract=off (CMakeLists.txt): no clone contracts a multiply-add the
// baseline rounds twice, so every CPU computes the same weights and a seed draws the same tokens
// everywhere.
#include "sampling/logit-loops.h"

#include "base/simd-clones.h"

namespace hearth::sampling {

// out[i] = in[i], NaN replaced by -inf (a NaN logit is an impossible token, as in
// greedy_argmax); returns the largest out[i] (-inf for n == 0).
HEARTH_SIMD_CLONES float copy_clean_max(const float* __restrict in, float* __restrict out,
                                        int64_t n) {
  float acc[kBlock];
  for (float& a : acc) a = kNegInf;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) out[i + j] = in[i + j] == in[i + j] ? in[i + j] : kNegInf;
    for (int64_t j = 0; j < kBlock; ++j) acc[j] = out[i + j] > acc[j] ? out[i + j] : acc[j];
  }
  float m = kNegInf;
  for (float a : acc) m = a > m ? a : m;
  for (; i < n; ++i) {
    out[i] = in[i] == in[i] ? in[i] : kNegInf;
    m = out[i] > m ? out[i] : m;
  }
  return m;
}

// Largest value (no NaN in x); -inf for n == 0.
HEARTH_SIMD_CLONES float max_value(const float* x, int64_t n) {
  float acc[kBlock];
  for (float& a : acc) a = kNegInf;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  float m = kNegInf;
  for (float a : acc) m = a > m ? a : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// Smallest value that is not -inf (no NaN in x); +inf when there is none.
HEARTH_SIMD_CLONES float min_finite_value(const float* x, int64_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float acc[kBlock];
  for (float& a : acc) a = kInf;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock)
    for (int64_t j = 0; j < kBlock; ++j)
      acc[j] = x[i + j] < acc[j] && x[i + j] != kNegInf ? x[i + j] : acc[j];
  float m = kInf;
  for (float a : acc) m = a < m ? a : m;
  for (; i < n; ++i) m = x[i] < m && x[i] != kNegInf ? x[i] : m;
  return m;
}

// w[i] = exp(x[i] / t - m / t) (the softmax numerators at temperature t, the max m scaled the
// same way so the largest is exactly 1); returns their sum, in double so a
// 150k-entry vocabulary loses nothing to the order of the additions.
HEARTH_SIMD_CLONES double exp_weights(const float* __restrict x, int64_t n, float m, float t,
                                      float* __restrict w) {
  const float ms = m / t;
  int64_t i = 0;
  double acc[kBlock] = {};
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) w[i + j] = exp_nonpositive(x[i + j] / t - ms);
    for (int64_t j = 0; j < kBlock; ++j) acc[j] += double(w[i + j]);
  }
  double sum = 0;
  for (double a : acc) sum += a;
  for (; i < n; ++i) sum += double(w[i] = exp_nonpositive(x[i] / t - ms));
  return sum;
}

}  // namespace hearth::sampling
