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

float dot_q4_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK32 / 2; ++j) {
      isum += ((w[i].qs[j] & 0xF) - 8) * x[i].qs[j];
      isum += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + kQK32 / 2];
    }
    sum += float(isum) * (h2f(w[i].d) * h2f(x[i].d));
  }
  return sum;
}

float dot_q4_1(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_1*>(wv);
  const auto* x = static_cast<const BlockQ8_1*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    int isum = 0;
    for (int j = 0; j < kQK32 / 2; ++j) {
      isum += (w[i].qs[j] & 0xF) * x[i].qs[j];
      isum += (w[i].qs[j] >> 4) * x[i].qs[j + kQK32 / 2];
    }
    sum += float(isum) * (h2f(w[i].d) * h2f(x[i].d)) + h2f(w[i].m) * h2f(x[i].s);
  }
  return sum;
}

float dot_q5_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ5_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const uint32_t qh = load_qh(w[i].qh);
    int isum = 0;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int q0 = int((w[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
      const int q1 = int((w[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      isum += q0 * x[i].qs[j] + q1 * x[i].qs[j + kQK32 / 2];
    }
    sum += float(isum) * (h2f(w[i].d) * h2f(x[i].d));
  }
  return sum;
}

float dot_q5_1(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ5_1*>(wv);
  const auto* x = static_cast<const BlockQ8_1*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const uint32_t qh = load_qh(w[i].qh);
    int isum = 0;
    for (int j = 0; j < kQK32 / 2; ++j) {
      const int q0 = int((w[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4));
      const int q1 = int((w[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      isum += q0 * x[i].qs[j] + q1 * x[i].qs[j + kQK32 / 2];
    }
    sum += float(isum) * (h2f(w[i].d) * h2f(x[i].d)) + h2f(w[i].m) * h2f(x[i].s);
  }
  return sum;
}

// K-quant dots: sum over sub-blocks of scale_j * <q_j, x_j> (integers), times d * x.d, minus
// the min terms dmin * x.d * sum_j m_j * (sum of x_j), where the x sums come from bsums.
float dot_q4_k(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_K*>(wv);
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sum_q = 0, sum_m = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      kquant_scale_min(j, w[i].scales, &sc, &m);
      const uint8_t* q = w[i].qs + 32 * (j / 2);
      const int8_t* a = x[i].qs + 32 * j;
      const int shift = (j & 1) * 4;
      int s = 0;
      for (int l = 0; l < 32; ++l) s += ((q[l] >> shift) & 0xF) * a[l];
      sum_q += sc * s;
      sum_m += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    sum += x[i].d * (h2f(w[i].d) * float(sum_q) - h2f(w[i].dmin) * float(sum_m));
  }
  return sum;
}

float dot_q5_k(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ5_K*>(wv);
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sum_q = 0, sum_m = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      kquant_scale_min(j, w[i].scales, &sc, &m);
      const uint8_t* q = w[i].qs + 32 * (j / 2);
      const int8_t* a = x[i].qs + 32 * j;
      const int shift = (j & 1) * 4;
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xF) | (((w[i].qh[l] >> j) & 1) << 4);
        s += v * a[l];
      }
      sum_q += sc * s;
      sum_m += m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    sum += x[i].d * (h2f(w[i].d) * float(sum_q) - h2f(w[i].dmin) * float(sum_m));
  }
  return sum;
}

float dot_f32(int64_t n, const void* wv, const void* xv) {
  const float* w = static_cast<const float*>(wv);
  const float* x = static_cast<const float*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

float dot_f16(int64_t n, const void* wv, const void* xv) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  const float* x = static_cast<const float*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_f32(w[i]) * x[i];
  return sum;
}

float dot_bf16(int64_t n, const void* wv, const void* xv) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  const float* x = static_cast<const float*>(xv);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_f32(w[i]) * x[i];
  return sum;
}

}  // namespace hearth::kernels::ref
