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

// Largest |x| in a block, and the signed value that has it (first one on ties).
inline void signed_absmax(const float* x, int n, float* amax, float* max) {
  *amax = 0.0f;
  *max = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float v = x[j];
    if (*amax < std::fabs(v)) {
      *amax = std::fabs(v);
      *max = v;
    }
  }
}

inline void min_max(const float* x, int n, float* min, float* max) {
  *min = 3.402823466e+38f;
  *max = -3.402823466e+38f;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

}  // namespace

void quantize_q4_0(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    float amax, max;
    signed_absmax(x, kQK32, &amax, &max);
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK32 / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQK32 / 2 + j] * id;
      const int q0 = std::min(15, trunc_clamped(x0 + 8.5f, -128, 127));
      const int q1 = std::min(15, trunc_clamped(x1 + 8.5f, -128, 127));
      y[i].qs[j] = uint8_t((q0 & 0xF) | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    float min, max;
    min_max(x, kQK32, &min, &max);
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(min);
    for (int j = 0; j < kQK32 / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[kQK32 / 2 + j] - min) * id;
      const int q0 = std::min(15, trunc_clamped(x0 + 0.5f, -128, 127));
      const int q1 = std::min(15, trunc_clamped(x1 + 0.5f, -128, 127));
      y[i].qs[j] = uint8_t((q0 & 0xF) | (q1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    float amax, max;
    signed_absmax(x, kQK32, &amax, &max);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[kQK32 / 2 + j] * id;
      const int q0 = std::min(31, trunc_clamped(x0 + 16.5f, -128, 127));
      const int q1 = std::min(31, trunc_clamped(x1 + 16.5f, -128, 127));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 & 0x10) >> 4) << j;
      qh |= uint32_t((q1 & 0x10) >> 4) << (j + kQK32 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_q5_1(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    float min, max;
    min_max(x, kQK32, &min, &max);
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[kQK32 / 2 + j] - min) * id;
      // ggml casts to uint8_t without clamping to 31; in-range input never exceeds it.
      const int q0 = trunc_clamped(x0 + 0.5f, 0, 255);
      const int q1 = trunc_clamped(x1 + 0.5f, 0, 255);
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 & 0x10) >> 4) << j;
      qh |= uint32_t((q1 & 0x10) >> 4) << (j + kQK32 / 2);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_q8_0(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    float amax = 0.0f;
    for (int j = 0; j < kQK32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK32; ++j)
      y[i].qs[j] = int8_t(trunc_clamped(std::round(x[j] * id), -127, 127));
  }
}

void quantize_q8_1(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    float amax = 0.0f;
    for (int j = 0; j < kQK32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK32 / 2; ++j) {
      y[i].qs[j] = int8_t(trunc_clamped(std::round(x[j] * id), -127, 127));
      y[i].qs[kQK32 / 2 + j] = int8_t(trunc_clamped(std::round(x[kQK32 / 2 + j] * id), -127, 127));
      sum += y[i].qs[j] + y[i].qs[kQK32 / 2 + j];
    }
    y[i].s = f32_to_fp16(float(sum) * d);
  }
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
  const auto* x = static_cast<const BlockQ4_0*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK32 / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0xF) - 8) * d;
      y[j + kQK32 / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = h2f(x[i].d), m = h2f(x[i].m);
    for (int j = 0; j < kQK32 / 2; ++j) {
      y[j] = float(x[i].qs[j] & 0xF) * d + m;
      y[j + kQK32 / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = h2f(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int h0 = int((qh >> j) & 1) << 4;
      const int h1 = int((qh >> (j + 16)) & 1) << 4;
      y[j] = float(((x[i].qs[j] & 0xF) | h0) - 16) * d;
      y[j + kQK32 / 2] = float(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_q5_1(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = h2f(x[i].d), m = h2f(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int h0 = int((qh >> j) & 1) << 4;
      const int h1 = int((qh >> (j + 16)) & 1) << 4;
      y[j] = float((x[i].qs[j] & 0xF) | h0) * d + m;
      y[j + kQK32 / 2] = float((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void dequantize_q8_0(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK32; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

void dequantize_q8_1(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK32; ++j) y[j] = float(x[i].qs[j]) * d;
  }
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
