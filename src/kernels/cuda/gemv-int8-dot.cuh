// The int8 GEMVs' per-dtype dot machinery, shared by the dense decode GEMV (gemv-int8.cu) and the
// MoE gather-GEMVs (moe-gemv-int8.cu): QT<T> says how a dtype's weight unit is loaded from a
// DeviceWeight and dotted with the int8 activations of act-quant.cuh. New dtype: one QT<>
// specialization here and a case in each launcher's switch.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/quant-device.cuh"
#include "kernels/cuda/weight-load.cuh"

namespace hearth::cuda::int8dot {

// Bytes of one weight row in each array a dtype's loads read, in DeviceWeight's field order (0:
// the dtype reads no such array).
struct WeightRowBytes {
  int64_t body, aux0, aux1, aux16, head;
};

__device__ __forceinline__ int dp4a(int a, int b, int c) {
  return __dp4a(a, b, c);
}

// Bits 0..3 of n to bit 4 of bytes 0..3 (Q5 high bits): the shifted copies never overlap.
__device__ __forceinline__ int spread4(uint32_t n) {
  return int(((n & 0xFu) * 0x00204081u & 0x01010101u) << 4);
}

// x block of 32 as the kernels read it: first-level ints (+ residual ints for two-level dtypes).
struct XOne {
  int v[8];
  float d, s;  // scale, d * sum(q)
};
struct XTwo {
  int v1[8], v2[8];
  float d1, d2;
};

__device__ __forceinline__ void ld8(const int8_t* p, int (&v)[8]) {
  const int4 a = __ldg(reinterpret_cast<const int4*>(p));
  const int4 b = __ldg(reinterpret_cast<const int4*>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ XOne x_one(const QuantizedActs& xa, int t, int64_t blk) {
  const int64_t nb = xa.cols >> 5;
  XOne x;
  ld8(xa.q1 + (t * xa.cols + blk * 32), x.v);
  const float4 s = __ldg(reinterpret_cast<const float4*>(xa.scales) + t * nb + blk);
  x.d = s.x;
  x.s = s.w;
  return x;
}

__device__ __forceinline__ XTwo x_two(const QuantizedActs& xa, int t, int64_t blk) {
  const int64_t nb = xa.cols >> 5;
  XTwo x;
  ld8(xa.q1 + (t * xa.cols + blk * 32), x.v1);
  ld8(xa.q2 + (t * xa.cols + blk * 32), x.v2);
  const float4 s = __ldg(reinterpret_cast<const float4*>(xa.scales) + t * nb + blk);
  x.d1 = s.x;
  x.d2 = s.y;
  return x;
}

// QT<T>: a dtype's unit loads and dot. load<kRead> reads the weight words as WeightRead says
// (weight-load.cuh): past L1 where the dtype takes it (Q4_0, Q8_0, Q4_K; the others read through
// it), or from the block's copy in shared memory. row_bytes() gives the bytes of one row in each
// array the loads read, in DeviceWeight's order (0: not read), which is what such a copy holds.
template <DType T>
struct QT;

// 32-element units: one packed block (16 body bytes) per unit, low nibbles elements 0..15 and
// high nibbles 16..31. Q5's fifth bits come in qh (bit j for element j; 0 for Q4, which the
// compiler folds away). The _0 types carry a scale d and an offset (8, 16) taken off through x's
// sum; the _1 types a (d, min) half pair.
template <DType T>
struct QLegacy {
  static constexpr bool kFive = T == DType::Q5_0 || T == DType::Q5_1;
  static constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1;
  static constexpr int kUnit = 32, kUnroll = 4;
  struct Raw {
    uint4 q;
    uint32_t qh;
    std::conditional_t<kMin, uint32_t, float> s;  // dm, or d
  };
  using X = XOne;
  template <WeightRead kRead = WeightRead::kCached>
  static __device__ Raw load(const DeviceWeight& w, int64_t row, int64_t u) {
    const int64_t bi = row * w.blocks_per_row + u;
    const uint4 q = read_weight16<kRead>(reinterpret_cast<const uint4*>(w.body) + bi);
    const uint32_t qh = kFive ? read_aux<kRead>(w.aux0 + bi) : 0u;
    if constexpr (kMin)
      return {q, qh, read_aux<kRead>((kFive ? w.aux1 : w.aux0) + bi)};
    else
      return {q, qh, half_bits(read_aux<kRead>(w.aux16 + bi))};
  }
  static constexpr WeightRowBytes row_bytes(int64_t bpr) {
    return {16 * bpr, kFive || kMin ? 4 * bpr : 0, kFive && kMin ? 4 * bpr : 0, kMin ? 0 : 2 * bpr,
            0};
  }
  static __device__ X load_x(const QuantizedActs& xa, int t, int64_t u) { return x_one(xa, t, u); }
  static __device__ float dot(const Raw& r, const X& x, int64_t) {
    const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s = dp4a(int(q[i] & 0x0F0F0F0Fu) | spread4(r.qh >> (4 * i)), x.v[i], s);
      s = dp4a(int((q[i] >> 4) & 0x0F0F0F0Fu) | spread4(r.qh >> (16 + 4 * i)), x.v[i + 4], s);
    }
    if constexpr (kMin)
      return half_bits(r.s) * x.d * float(s) + half_bits(r.s >> 16) * x.s;
    else
      return r.s * (x.d * float(s) - (kFive ? 16.f : 8.f) * x.s);
  }
};
template <>
struct QT<DType::Q4_0> : QLegacy<DType::Q4_0> {};
template <>
struct QT<DType::Q4_1> : QLegacy<DType::Q4_1> {};
template <>
struct QT<DType::Q5_0> : QLegacy<DType::Q5_0> {};
template <>
struct QT<DType::Q5_1> : QLegacy<DType::Q5_1> {};

// Q8_0 takes the two-level x: one int8 level doubles the model's KLD for 8-bit weights.
template <>
struct QT<DType::Q8_0> {
  static constexpr int kUnit = 32, kUnroll = 2;
  struct Raw {
    uint4 a, b;
    float d;
  };
  using X = XTwo;
  template <WeightRead kRead = WeightRead::kCached>
  static __device__ Raw load(const DeviceWeight& w, int64_t row, int64_t u) {
    const int64_t bi = row * w.blocks_per_row + u;
    const uint4* p = reinterpret_cast<const uint4*>(w.body) + 2 * bi;
    return {read_weight16<kRead>(p), read_weight16<kRead>(p + 1),
            half_bits(read_aux<kRead>(w.aux16 + bi))};
  }
  static constexpr WeightRowBytes row_bytes(int64_t bpr) { return {32 * bpr, 0, 0, 2 * bpr, 0}; }
  static __device__ X load_x(const QuantizedActs& xa, int t, int64_t u) { return x_two(xa, t, u); }
  static __device__ float dot(const Raw& r, const X& x, int64_t) {
    const int q[8] = {int(r.a.x), int(r.a.y), int(r.a.z), int(r.a.w),
                      int(r.b.x), int(r.b.y), int(r.b.z), int(r.b.w)};
    int s1 = 0, s2 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s1 = dp4a(q[i], x.v1[i], s1);
      s2 = dp4a(q[i], x.v2[i], s2);
    }
    return r.d * (x.d1 * float(s1) + x.d2 * float(s2));
  }
};

// 64-element units of 256-element super-blocks. Q4_K/Q5_K unit c (0..3) is sub-blocks 2c
// (low nibbles) and 2c+1 (high nibbles) of the same 32 quant bytes; Q5_K's fifth bits are bits
// 2c and 2c+1 of its 32 qh bytes (zero for Q4_K, which the compiler folds away).
struct XPair {
  XOne lo, hi;
};

template <DType T>
struct QK45 {
  static constexpr bool kFive = T == DType::Q5_K;
  static constexpr int kUnit = 64, kUnroll = 2;
  struct Raw {
    uint4 h, q0, q1, qh0, qh1;
  };
  using X = XPair;
  template <WeightRead kRead = WeightRead::kCached>
  static __device__ Raw load(const DeviceWeight& w, int64_t row, int64_t u) {
    if constexpr (kFive) {
      const uint8_t* blk = w.body + (row * w.blocks_per_row + (u >> 2)) * 176;
      const uint4* q = reinterpret_cast<const uint4*>(blk + 48 + (u & 3) * 32);
      const uint4* qh = reinterpret_cast<const uint4*>(blk + 16);
      return {read_aux<kRead>(reinterpret_cast<const uint4*>(blk)), read_aux<kRead>(q),
              read_aux<kRead>(q + 1), read_aux<kRead>(qh), read_aux<kRead>(qh + 1)};
    } else {
      // Packed layout (dequantize.cu): quants contiguous in the body, heads in their own array.
      const int64_t bi = row * w.blocks_per_row + (u >> 2);
      const uint4* q = reinterpret_cast<const uint4*>(w.body + bi * 128 + (u & 3) * 32);
      const uint4 none = make_uint4(0, 0, 0, 0);
      return {read_aux<kRead>(w.aux_head + bi), read_weight16<kRead>(q),
              read_weight16<kRead>(q + 1), none, none};
    }
  }
  static constexpr WeightRowBytes row_bytes(int64_t bpr) {
    return kFive ? WeightRowBytes{176 * bpr, 0, 0, 0, 0}
                 : WeightRowBytes{128 * bpr, 0, 0, 0, 16 * bpr};
  }
  static __device__ X load_x(const QuantizedActs& xa, int t, int64_t u) {
    return {x_one(xa, t, 2 * u), x_one(xa, t, 2 * u + 1)};
  }
  static __device__ float dot(const Raw& r, const X& x, int64_t u) {
    const uint32_t q[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
    const uint32_t h[8] = {r.qh0.x, r.qh0.y, r.qh0.z, r.qh0.w, r.qh1.x, r.qh1.y, r.qh1.z, r.qh1.w};
    const int c = int(u & 3);
    int lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      lo =
          dp4a(int((q[i] & 0x0F0F0F0Fu) | (((h[i] >> (2 * c)) & 0x01010101u) << 4)), x.lo.v[i], lo);
      hi = dp4a(int(((q[i] >> 4) & 0x0F0F0F0Fu) | (((h[i] >> (2 * c + 1)) & 0x01010101u) << 4)),
                x.hi.v[i], hi);
    }
    float sc0, m0, sc1, m1;
    k_scale_min(r.h, 2 * c, sc0, m0);
    k_scale_min(r.h, 2 * c + 1, sc1, m1);
    return half_bits(r.h.x) * (sc0 * x.lo.d * float(lo) + sc1 * x.hi.d * float(hi)) -
           half_bits(r.h.x >> 16) * (m0 * x.lo.s + m1 * x.hi.s);
  }
};
template <>
struct QT<DType::Q4_K> : QK45<DType::Q4_K> {};
template <>
struct QT<DType::Q5_K> : QK45<DType::Q5_K> {};

// Q6_K unit (half h, k in {0,1}): 32 ql bytes give elements 32k+l (low nibbles) and 64+32k+l
// (high nibbles) of the half, qh bits 2k and 2k+4; 16-element sub-blocks each with an int8 scale.
// Two-level x, like Q8_0 (one level doubles the KLD of Q6_K files).
struct XPair2 {
  XTwo lo, hi;
};

template <>
struct QT<DType::Q6_K> {
  static constexpr int kUnit = 64, kUnroll = 2;
  struct Raw {
    uint4 l0, l1, h0, h1;
    uint2 sc;
    float d;
  };
  using X = XPair2;
  template <WeightRead kRead = WeightRead::kCached>
  static __device__ Raw load(const DeviceWeight& w, int64_t row, int64_t u) {
    const int64_t bi = row * w.blocks_per_row + (u >> 2);
    const int h = int(u >> 1) & 1, k = int(u & 1);
    const uint8_t* blk = w.body + bi * 208;
    const uint4* ql = reinterpret_cast<const uint4*>(blk + 64 * h + 32 * k);
    const uint4* qh = reinterpret_cast<const uint4*>(blk + 128 + 32 * h);
    return {read_aux<kRead>(ql),
            read_aux<kRead>(ql + 1),
            read_aux<kRead>(qh),
            read_aux<kRead>(qh + 1),
            read_aux<kRead>(reinterpret_cast<const uint2*>(blk + 192 + 8 * h)),
            half_bits(read_aux<kRead>(w.aux16 + bi))};
  }
  static constexpr WeightRowBytes row_bytes(int64_t bpr) { return {208 * bpr, 0, 0, 2 * bpr, 0}; }
  static __device__ X load_x(const QuantizedActs& xa, int t, int64_t u) {
    const int64_t sb = u >> 2, h = (u >> 1) & 1, k = u & 1;
    const int64_t b = sb * 8 + 4 * h + k;
    return {x_two(xa, t, b), x_two(xa, t, b + 2)};
  }
  static __device__ float dot(const Raw& r, const X& x, int64_t u) {
    const uint32_t ql[8] = {r.l0.x, r.l0.y, r.l0.z, r.l0.w, r.l1.x, r.l1.y, r.l1.z, r.l1.w};
    const uint32_t qh[8] = {r.h0.x, r.h0.y, r.h0.z, r.h0.w, r.h1.x, r.h1.y, r.h1.z, r.h1.w};
    const int k = int(u & 1);
    int l1[2] = {0, 0}, l2[2] = {0, 0}, h1[2] = {0, 0}, h2[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int sub = i >> 2;
      const uint32_t wl =
          __vsub4((ql[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * k)) & 0x03030303u) << 4), 0x20202020u);
      const uint32_t wh =
          __vsub4(((ql[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * k + 4)) & 0x03030303u) << 4),
                  0x20202020u);
      l1[sub] = dp4a(int(wl), x.lo.v1[i], l1[sub]);
      l2[sub] = dp4a(int(wl), x.lo.v2[i], l2[sub]);
      h1[sub] = dp4a(int(wh), x.hi.v1[i], h1[sub]);
      h2[sub] = dp4a(int(wh), x.hi.v2[i], h2[sub]);
    }
    // Scale bytes of this unit: low sub-blocks 2k, 2k+1; high 4+2k, 5+2k.
    const uint32_t sl = r.sc.x >> (16 * k), sh = r.sc.y >> (16 * k);
    const float s0 = float(int8_t(sl & 0xFF)), s1 = float(int8_t((sl >> 8) & 0xFF));
    const float s2 = float(int8_t(sh & 0xFF)), s3 = float(int8_t((sh >> 8) & 0xFF));
    const float lo0 = x.lo.d1 * float(l1[0]) + x.lo.d2 * float(l2[0]);
    const float lo1 = x.lo.d1 * float(l1[1]) + x.lo.d2 * float(l2[1]);
    const float hi0 = x.hi.d1 * float(h1[0]) + x.hi.d2 * float(h2[0]);
    const float hi1 = x.hi.d1 * float(h1[1]) + x.hi.d2 * float(h2[1]);
    return r.d * (s0 * lo0 + s1 * lo1 + s2 * hi0 + s3 * hi1);
  }
};

}  // namespace hearth::cuda::int8dot
