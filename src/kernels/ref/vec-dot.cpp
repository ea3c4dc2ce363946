// Reference dot products: one weight row (block type) x one activation row (its vec-dot type).
// Integer sums per block are exact; SIMD kernels must agree up to float summation order.
#include <cstring>

#include "base/half.h"
#include "kernels/quant-blocks.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels::ref {

namespace {
inline float h2f(uint16_t h) {
  return fp16_to_f32(h);
}
inline uint32_t load_qh(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace

// The 32-element legacy formats: sum_j code(w, j) * x.qs[j] per block (exact integers), scaled
// by d_w * d_x, plus m_w * s_x for the formats with a min (x.s = d_x * sum of x's codes).
template <class WBlock, class XBlock, class Code>
float dot_blocks32(int64_t n, const void* wv, const void* xv, Code code) {
  const auto* w = static_cast<const WBlock*>(wv);
  const auto* x = static_cast<const XBlock*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK32; ++j) isum += code(w[i], j) * x[i].qs[j];
    sum += float(isum) * (h2f(w[i].d) * h2f(x[i].d));
    if constexpr (requires { w[i].m; }) sum += h2f(w[i].m) * h2f(x[i].s);
  }
  return sum;
}

// Element j of a 32-element block: low nibbles are elements 0..15, high nibbles 16..31; the
// 5-bit formats take bit j of qh as the fifth bit.
template <class Block>
int nibble(const Block& b, int j) {
  return (b.qs[j % 16] >> (4 * (j / 16))) & 0xF;
}
template <class Block>
int five_bits(const Block& b, int j) {
  return nibble(b, j) | int(((load_qh(b.qh) >> j) & 1) << 4);
}

float dot_q4_0(int64_t n, const void* wv, const void* xv) {
  return dot_blocks32<BlockQ4_0, BlockQ8_0>(
      n, wv, xv, [](const BlockQ4_0& b, int j) { return nibble(b, j) - 8; });
}

float dot_q4_1(int64_t n, const void* wv, const void* xv) {
  return dot_blocks32<BlockQ4_1, BlockQ8_1>(n, wv, xv,
                                            [](const BlockQ4_1& b, int j) { return nibble(b, j); });
}

float dot_q5_0(int64_t n, const void* wv, const void* xv) {
  return dot_blocks32<BlockQ5_0, BlockQ8_0>(
      n, wv, xv, [](const BlockQ5_0& b, int j) { return five_bits(b, j) - 16; });
}

float dot_q5_1(int64_t n, const void* wv, const void* xv) {
  return dot_blocks32<BlockQ5_1, BlockQ8_1>(
      n, wv, xv, [](const BlockQ5_1& b, int j) { return five_bits(b, j); });
}

// K-quant dots: sum over sub-blocks of scale_j * <q_j, x_j> (integers), times d * x.d, minus
// the min terms dmin * x.d * sum_j m_j * (sum of x_j), where the x sums come from bsums.
// code(block, j, l): element l of sub-block j.
template <class Block, class Code>
float dot_kquant(int64_t n, const void* wv, const void* xv, Code code) {
  const auto* w = static_cast<const Block*>(wv);
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sum_q = 0, sum_m = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      kquant_scale_min(j, w[i].scales, &sc, &m);
      const int8_t* a = x[i].qs + 32 * j;
      int s = 0;
      for (int l = 0; l < 32; ++l) s += code(w[i], j, l) * a[l];
      sum_q += sc * s;
      sum_m += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    sum += x[i].d * (h2f(w[i].d) * float(sum_q) - h2f(w[i].dmin) * float(sum_m));
  }
  return sum;
}

// Sub-blocks 2c and 2c + 1 share bytes qs[32c .. 32c + 31]: low nibbles, then high.
template <class Block>
int kquant_nibble(const Block& b, int j, int l) {
  return (b.qs[32 * (j / 2) + l] >> ((j & 1) * 4)) & 0xF;
}

float dot_q4_k(int64_t n, const void* wv, const void* xv) {
  return dot_kquant<BlockQ4_K>(
      n, wv, xv, [](const BlockQ4_K& b, int j, int l) { return kquant_nibble(b, j, l); });
}

float dot_q5_k(int64_t n, const void* wv, const void* xv) {
  return dot_kquant<BlockQ5_K>(n, wv, xv, [](const BlockQ5_K& b, int j, int l) {
    return kquant_nibble(b, j, l) | (((b.qh[l] >> j) & 1) << 4);
  });
}

float dot_mxfp4(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockMxfp4*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK32; ++j) isum += kMxfp4Values[nibble(w[i], j)] * x[i].qs[j];
    sum += float(isum) * (mxfp4_scale(w[i].e) * h2f(x[i].d));
  }
  return sum;
}

// Float rows: sum of to_f32(w[i]) * x[i] in order.
template <class W, class ToF32>
float dot_floats(int64_t n, const void* wv, const void* xv, ToF32 to_f32) {
  const W* w = static_cast<const W*>(wv);
  const float* x = static_cast<const float*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += to_f32(w[i]) * x[i];
  return sum;
}

float dot_f32(int64_t n, const void* wv, const void* xv) {
  return dot_floats<float>(n, wv, xv, [](float v) { return v; });
}

float dot_f16(int64_t n, const void* wv, const void* xv) {
  return dot_floats<uint16_t>(n, wv, xv, fp16_to_f32);
}

float dot_bf16(int64_t n, const void* wv, const void* xv) {
  return dot_floats<uint16_t>(n, wv, xv, bf16_to_f32);
}

}  // namespace hearth::kernels::ref
