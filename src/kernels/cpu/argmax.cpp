// The greedy pick over a logits row (ops.h: argmax), the CPU's form of cuda/argmax.cu. One pass
// over blocks of 256 entries: each block's largest in vector lanes (four chains of 16, so a max's
// latency does not bound the loop), then across the lanes; the first block whose largest beats
// every earlier one's is searched for its first entry of that value at the end. Written with
// GCC/Clang vector extensions, which HEARTH_SIMD_CLONES lowers per CPU (one zmm, two ymm or four
// xmm per 16 floats; NEON registers on ARM): plain loops with ternaries stayed scalar at -O2. The
// scalar loop this replaced took ~0.7 ns an entry (22 us a 32,000-entry row, AMD Zen 5): on a
// 2-core CPU serving 8 kjv-13m sequences, the 8 rows took ~10% of the step.
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/simd-clones.h"
#include "kernels/ops.h"

// (GCC notes that 64-byte vectors are passed differently with AVX-512; none crosses a call.)
#pragma GCC diagnostic ignored "-Wpsabi"

namespace hearth::kernels {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
typedef float F16x __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
constexpr int64_t kBlock = 16 * kLanes;

inline F16x load(const float* p) {
  F16x v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A NaN compares false and is never taken, here and below.
inline F16x larger(F16x a, F16x b) {
  return a > b ? a : b;
}

HEARTH_SIMD_CLONES int64_t first_largest(const float* x, int64_t n) {
  float m = kNegInf;
  int64_t block_of_m = 0;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    F16x acc[4];
    for (F16x& a : acc) a = F16x{} + kNegInf;
    for (int64_t k = 0; k < kBlock; k += 4 * kLanes)
      for (int a = 0; a < 4; ++a) acc[a] = larger(load(x + i + k + a * kLanes), acc[a]);
    const F16x lanes = larger(larger(acc[0], acc[1]), larger(acc[2], acc[3]));
    float block_max = kNegInf;
    for (int64_t j = 0; j < kLanes; ++j) block_max = lanes[j] > block_max ? lanes[j] : block_max;
    if (block_max > m) m = block_max, block_of_m = i;  // strictly: the earliest block keeps it
  }
  int64_t tail_at = -1;  // the tail, one at a time: its first largest, if above the blocks'
  for (int64_t j = i; j < n; ++j)
    if (x[j] > m) m = x[j], tail_at = j;
  if (tail_at >= 0) return tail_at;
  if (!(m > kNegInf)) return 0;  // empty, or nothing above -inf (NaN included)
  for (int64_t j = block_of_m;; ++j)
    if (x[j] == m) return j;
}

}  // namespace

int32_t argmax(const float* x, int64_t n) {
  return int32_t(first_largest(x, n));
}

}  // namespace hearth::kernels
