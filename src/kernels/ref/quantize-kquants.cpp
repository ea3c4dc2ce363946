// Reference quantize/dequantize for the K-quants (Q4_K, Q5_K, Q6_K) and the Q8_K activation
// blocks. The scale searches are ggml's (make_qkx2 for Q4_K/Q5_K, make_qx for Q6_K), same order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kernels/quant-blocks.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels::ref {

namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Fits x ~ scale * L - min (L in [0, nmax], min >= 0 returned in *the_min) minimising the
// weighted squared error: start from the min/max grid, then try nstep+1 grid stretches and
// keep each one's least-squares (scale, min) when it lowers the error.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        err += weights[i] * diff;
      }
      if (err < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Symmetric fit x ~ scale * (L - nmax), L in [0, 2*nmax), weights x^2 (ggml's rmse_type 1):
// tries 18 stretches of the max-abs grid and keeps the best least-squares scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max, amax;
  signed_absmax(x, n, &amax, &max);
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Shared by Q4_K and Q5_K: per sub-block (scale, min) search, 6-bit packing of both into
// scales[12], then the final levels recomputed from the rounded scales.
void quantize_k_scales_and_levels(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out,
                                  uint16_t* dmin_out, uint8_t* packed, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                 0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(packed, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = uint8_t(std::min(63, nearest_int(inv_scale * scales[j])));
    const uint8_t lm = uint8_t(std::min(63, nearest_int(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= uint8_t((ls >> 4) << 6);
      packed[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  *d_out = f32_to_fp16(max_scale / 63.f);
  *dmin_out = f32_to_fp16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    kquant_scale_min(j, packed, &sc, &m);
    const float d = fp16_to_f32(*d_out) * sc;
    if (!d) continue;
    const float dm = fp16_to_f32(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

// Q4_K and Q5_K share the scale search and the nibble layout: per 64 elements, levels j and
// j + 32 share byte j of qs; Q5_K's fifth bits go to qh (bit 2c for the low nibble of chunk c,
// 2c + 1 for the high one). Q4_K's levels stay below 16, so the same loop leaves its qs exact.
template <class Block>
void quantize_kquant(const float* x, void* out, int64_t n, int nmax, float rmin, int nstep) {
  auto* y = static_cast<Block*>(out);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    quantize_k_scales_and_levels(x, nmax, rmin, nstep, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* ql = y[i].qs;
    uint8_t qh[kQKK / 8] = {};
    for (int b = 0, c = 0; b < kQKK; b += 64, ql += 32, ++c) {
      for (int j = 0; j < 32; ++j) {
        const int l1 = L[b + j], l2 = L[b + j + 32];
        qh[j] |= uint8_t(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
        ql[j] = uint8_t((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
    }
    if constexpr (requires(Block blk) { blk.qh; }) std::memcpy(y[i].qh, qh, sizeof qh);
  }
}

}  // namespace

void quantize_q4_k(const float* x, void* out, int64_t n) {
  quantize_kquant<BlockQ4_K>(x, out, n, 15, -1.f, 20);
}

void quantize_q5_k(const float* x, void* out, int64_t n) {
  quantize_kquant<BlockQ5_K>(x, out, n, 31, -0.5f, 15);
}

void quantize_q6_k(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(out);
  int8_t L[kQKK];
  float scales[kQKK / 16];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQKK / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQKK / 16; ++ib)
      y[i].scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQKK / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = int8_t(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQKK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
        const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = uint8_t(q1 | (q3 << 4));
        ql[l + 32] = uint8_t(q2 | (q4 << 4));
        qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                        ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(out);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float max, amax;
    signed_absmax(x, kQKK, &amax, &max);
    if (!amax) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // -127 (not -128) keeps every q in [-127, 127], so SIMD sign tricks cannot overflow.
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) y[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = int16_t(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void dequantize_q4_k(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(in);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0, is = 0; j < kQKK; j += 64, q += 32, is += 2) {
      uint8_t sc, m;
      kquant_scale_min(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      kquant_scale_min(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(in);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < kQKK; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      kquant_scale_min(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      kquant_scale_min(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

// The sub-block's d (s - 32) first, then the code: Q6_K's dequantizer multiplies in the same
// order, so a Q3_K block rewritten as Q6_K (model/weight-transcode.cpp) gives the same floats.
void dequantize_q3_k(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(in);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    const float d = fp16_to_f32(x[i].d);
    for (int e = 0; e < kQKK; ++e) {
      const int sub = 8 * (e / 128) + 2 * ((e % 128) / 32) + (e % 32) / 16;
      y[e] = d * float(q3_k_scale(x[i].scales, sub) - 32) * float(q3_k_code(x[i], e));
    }
  }
}

void dequantize_q6_k(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(in);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int b = 0; b < kQKK; b += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void dequantize_q8_k(const void* in, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(in);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK)
    for (int j = 0; j < kQKK; ++j) y[j] = x[i].d * x[i].qs[j];
}

}  // namespace hearth::kernels::ref
