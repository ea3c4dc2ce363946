// Reference quantize/dequantize for the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q8_1) and the plain float types. The quantizers follow ggml's quantize_row_*_ref step by step
// (same float operations in the same order, compiled with -ffp-contract=off) so their bytes match.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kernels/quant-blocks.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels::ref {

namespace {

// C's float -> integer conversion (truncation) for in-range values; NaN and out-of-range
// values (only reachable from non-finite input) are clamped instead of being undefined.
inline int trunc_clamped(float v, int lo, int hi) {
  if (!(v == v)) return 0;
  if (v <= float(lo)) return lo;
  if (v >= float(hi)) return hi;
  return int(v);
}

inline float h2f(uint16_t h) {
  return fp16_to_f32(h);
}

inline void min_max(const float* x, int n, float* min, float* max) {
  *min = 3.402823466e+38f;
  *max = -3.402823466e+38f;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

// Q4_1 and Q5_1 carry a min (x = d * q + m); Q4_0 and Q5_0 are symmetric (x = d * (q - offset)).
template <class Block>
constexpr bool kHasMin = requires(Block b) {
  b.m;
};
template <class Block>
constexpr bool kHasFifthBit = requires(Block b) {
  b.qh;
};

// How ggml turns a scaled value v into a code: min(max_code, (int)(v + round_offset)) with the
// cast's range [lo, hi] (int8_t, or uint8_t for Q5_1, which ggml does not clamp to 31).
struct CodeRule {
  float round_offset;
  int lo, hi, max_code;
};

// Q4_0, Q4_1, Q5_0, Q5_1 (ggml quantize_row_q{4,5}_{0,1}_ref): element j and j + 16 share a
// byte of qs; the fifth bits, where the block has them, are bits j of qh.
template <class Block>
void quantize_legacy(const float* x, void* out, int64_t n, CodeRule rule) {
  constexpr int kLevels = kHasFifthBit<Block> ? 32 : 16;
  auto* y = static_cast<Block*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    // Symmetric: d = max / -(levels / 2) and min stays 0 (x - 0.0f is x to the bit, NaN and -0
    // included, so both kinds share the code loop).
    float min = 0.0f, max;
    float d;
    if constexpr (kHasMin<Block>) {
      min_max(x, kQK32, &min, &max);
      d = (max - min) / (kLevels - 1);
      y[i].m = f32_to_fp16(min);
    } else {
      float amax;
      signed_absmax(x, kQK32, &amax, &max);
      d = max / -(kLevels / 2);
    }
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[kQK32 / 2 + j] - min) * id;
      const int q0 =
          std::min(rule.max_code, trunc_clamped(x0 + rule.round_offset, rule.lo, rule.hi));
      const int q1 =
          std::min(rule.max_code, trunc_clamped(x1 + rule.round_offset, rule.lo, rule.hi));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 & 0x10) >> 4) << j;
      qh |= uint32_t((q1 & 0x10) >> 4) << (j + kQK32 / 2);
    }
    if constexpr (kHasFifthBit<Block>) std::memcpy(y[i].qh, &qh, 4);
  }
}

// The inverse: q = nibble | fifth bit << 4, then d * (q - offset) or d * q + m.
template <class Block>
void dequantize_legacy(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = h2f(x[i].d);
    uint32_t qh = 0;
    if constexpr (kHasFifthBit<Block>) std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | int((qh >> j) & 1) << 4;
      const int q1 = (x[i].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
      if constexpr (kHasMin<Block>) {
        const float m = h2f(x[i].m);
        y[j] = float(q0) * d + m;
        y[j + kQK32 / 2] = float(q1) * d + m;
      } else {
        constexpr int kOffset = kHasFifthBit<Block> ? 16 : 8;
        y[j] = float(q0 - kOffset) * d;
        y[j + kQK32 / 2] = float(q1 - kOffset) * d;
      }
    }
  }
}

// Q8_0 and Q8_1 (ggml quantize_row_q8_{0,1}_ref): round(x / d), d = amax / 127; Q8_1 also keeps
// s = d * sum(q) for the weight's min term.
template <class Block>
void quantize_q8(const float* x, void* out, int64_t n) {
  auto* y = static_cast<Block*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    float amax = 0.0f;
    for (int j = 0; j < kQK32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK32; ++j) {
      y[i].qs[j] = int8_t(trunc_clamped(std::round(x[j] * id), -127, 127));
      sum += y[i].qs[j];
    }
    if constexpr (requires(Block b) { b.s; }) y[i].s = f32_to_fp16(float(sum) * d);
  }
}

template <class Block>
void dequantize_q8(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const Block*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK32; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

}  // namespace

void quantize_q4_0(const float* x, void* out, int64_t n) {
  quantize_legacy<BlockQ4_0>(x, out, n, {8.5f, -128, 127, 15});
}

void quantize_q4_1(const float* x, void* out, int64_t n) {
  quantize_legacy<BlockQ4_1>(x, out, n, {0.5f, -128, 127, 15});
}

void quantize_q5_0(const float* x, void* out, int64_t n) {
  quantize_legacy<BlockQ5_0>(x, out, n, {16.5f, -128, 127, 31});
}

void quantize_q5_1(const float* x, void* out, int64_t n) {
  quantize_legacy<BlockQ5_1>(x, out, n, {0.5f, 0, 255, 255});
}

void quantize_q8_0(const float* x, void* out, int64_t n) {
  quantize_q8<BlockQ8_0>(x, out, n);
}

void quantize_q8_1(const float* x, void* out, int64_t n) {
  quantize_q8<BlockQ8_1>(x, out, n);
}

void quantize_f16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

void quantize_bf16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

void dequantize_q4_0(const void* in, float* y, int64_t n) {
  dequantize_legacy<BlockQ4_0>(in, y, n);
}

void dequantize_q4_1(const void* in, float* y, int64_t n) {
  dequantize_legacy<BlockQ4_1>(in, y, n);
}

void dequantize_q5_0(const void* in, float* y, int64_t n) {
  dequantize_legacy<BlockQ5_0>(in, y, n);
}

void dequantize_q5_1(const void* in, float* y, int64_t n) {
  dequantize_legacy<BlockQ5_1>(in, y, n);
}

void dequantize_q8_0(const void* in, float* y, int64_t n) {
  dequantize_q8<BlockQ8_0>(in, y, n);
}

void dequantize_q8_1(const void* in, float* y, int64_t n) {
  dequantize_q8<BlockQ8_1>(in, y, n);
}

void dequantize_f32(const void* in, float* y, int64_t n) {
  std::memcpy(y, in, size_t(n) * sizeof(float));
}

void dequantize_f16(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(in);
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}

void dequantize_bf16(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(in);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

}  // namespace hearth::kernels::ref
