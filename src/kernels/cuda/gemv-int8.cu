// Decode GEMV for the quantized dtypes on integer dot products: x is quantized once per matmul to
// int8 blocks of 32 (plus a residual level), weights stay packed and meet x in dp4a. New dtype:
// one QT<> specialization (unit size, raw load, dot) and a case in launch_gemv_int8().
#include <type_traits>

#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/gemv-store.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/weight-load.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 8;  // warps per block
constexpr int kRows = 2;   // rows per warp: each x load feeds kRows rows

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

// QT<T>: a dtype's unit loads and dot. load<kStream> reads the 16-byte weight words past L1
// (weight-load.cuh) where the dtype takes it (Q4_0, Q8_0, Q4_K); the others ignore it.
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
  template <bool kStream = false>
  static __device__ Raw load(const DeviceWeight& w, int64_t row, int64_t u) {
    const int64_t bi = row * w.blocks_per_row + u;
    const uint4 q = load_weight16<kStream>(reinterpret_cast<const uint4*>(w.body) + bi);
    const uint32_t qh = kFive ? __ldg(w.aux0 + bi) : 0u;
    if constexpr (kMin)
      return {q, qh, __ldg((kFive ? w.aux1 : w.aux0) + bi)};
    else
      return {q, qh, half_bits(__ldg(w.aux16 + bi))};
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
  template <bool kStream = false>
  static __device__ Raw load(const DeviceWeight& w, int64_t row, int64_t u) {
    const int64_t bi = row * w.blocks_per_row + u;
    const uint4* p = reinterpret_cast<const uint4*>(w.body) + 2 * bi;
    return {load_weight16<kStream>(p), load_weight16<kStream>(p + 1),
            half_bits(__ldg(w.aux16 + bi))};
  }
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
  template <bool kStream = false>
  static __device__ Raw load(const DeviceWeight& w, int64_t row, int64_t u) {
    if constexpr (kFive) {
      const uint8_t* blk = w.body + (row * w.blocks_per_row + (u >> 2)) * 176;
      const uint4* q = reinterpret_cast<const uint4*>(blk + 48 + (u & 3) * 32);
      const uint4* qh = reinterpret_cast<const uint4*>(blk + 16);
      return {__ldg(reinterpret_cast<const uint4*>(blk)), __ldg(q), __ldg(q + 1), __ldg(qh),
              __ldg(qh + 1)};
    } else {
      // Packed layout (dequantize.cu): quants contiguous in the body, heads in their own array.
      const int64_t bi = row * w.blocks_per_row + (u >> 2);
      const uint4* q = reinterpret_cast<const uint4*>(w.body + bi * 128 + (u & 3) * 32);
      const uint4 none = make_uint4(0, 0, 0, 0);
      return {__ldg(w.aux_head + bi), load_weight16<kStream>(q), load_weight16<kStream>(q + 1),
              none, none};
    }
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
  template <bool kStream = false>
  static __device__ Raw load(const DeviceWeight& w, int64_t row, int64_t u) {
    const int64_t bi = row * w.blocks_per_row + (u >> 2);
    const int h = int(u >> 1) & 1, k = int(u & 1);
    const uint8_t* blk = w.body + bi * 208;
    const uint4* ql = reinterpret_cast<const uint4*>(blk + 64 * h + 32 * k);
    const uint4* qh = reinterpret_cast<const uint4*>(blk + 128 + 32 * h);
    return {__ldg(ql),
            __ldg(ql + 1),
            __ldg(qh),
            __ldg(qh + 1),
            __ldg(reinterpret_cast<const uint2*>(blk + 192 + 8 * h)),
            half_bits(__ldg(w.aux16 + bi))};
  }
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

// W {d, n} @ x [NT, n] -> y [NT, d]. A warp takes kRows rows; each lane a unit per step, all
// kUnroll*kRows unit loads of a step issued before the first dot (several 16-byte loads in
// flight per lane); each x unit is read once and used for every row of the warp.
// kSplit: warps per row group, each taking every kSplit-th step (gemv_split(); one token).
// kMinBlocks: blocks per SM the register allocation must allow (3: at most 80 registers).
// kStream: weight loads past L1 (weight-load.cuh; launch_plain picks it for Q4_0, where it won).
template <DType T, int NT, int kSplit = 1, int kMinBlocks = 1, bool kStream = false>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    gemv_int8_kernel(GemvBatch batch, QuantizedActs xa) {
  using Q = QT<T>;
  pdl_trigger();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  DeviceWeight w;
  float *y, *add;
  const int64_t row0 = gemv_warp_job<kWarps, kRows, kSplit>(batch, warp, w, y, add);
  const int64_t d = w.rows;
  const int part = warp % kSplit;
  // Split groups stay to the end: store_gemv_rows_split reduces across their warps.
  if (kSplit == 1 && row0 >= d) return;
  int64_t rows[kRows];
  gemv_read_rows(row0, d, rows);
  const int64_t nu = w.cols / Q::kUnit;
  float acc[kRows][NT];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

  using Raw = typename Q::Raw;
  // All kUnroll*kRows unit loads of a step first (several 16-byte loads in flight per lane).
  auto load_step = [&](Raw(&buf)[Q::kUnroll][kRows], int64_t u0) {
#pragma unroll
    for (int k = 0; k < Q::kUnroll; ++k) {
      const int64_t u = u0 + 32 * k < nu ? u0 + 32 * k : nu - 1;
#pragma unroll
      for (int r = 0; r < kRows; ++r) buf[k][r] = Q::template load<kStream>(w, rows[r], u);
    }
  };
  auto dot_step = [&](const Raw(&buf)[Q::kUnroll][kRows], int64_t u0) {
#pragma unroll
    for (int k = 0; k < Q::kUnroll; ++k) {
      const int64_t u = u0 + 32 * k;
      if (u >= nu) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const typename Q::X x = Q::load_x(xa, t, u);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][t] += Q::dot(buf[k][r], x, u);
      }
    }
  };
  // Waiting before the first weight load: measured faster than loading one step of weights
  // ahead of the wait, which pins the x loads behind the weights (sessions 2 and 8: Q4_K
  // tg128 345 against 484 tok/s).
  pdl_wait();
  for (int64_t u0 = lane + part * 32 * Q::kUnroll; u0 < nu; u0 += kSplit * 32 * Q::kUnroll) {
    Raw raw[Q::kUnroll][kRows];
    load_step(raw, u0);
    dot_step(raw, u0);
  }
  store_gemv_rows_split<kSplit, kWarps, kRows, NT>(acc, warp, lane, row0, d, y, add);
}

// One warp per 32-element block: q1 = round(x / d1), then the residual x - d1*q1 to q2 the
// same way, so d1*q1 + d2*q2 carries ~14 bits of each x.
__global__ void quantize_acts_kernel(const float* __restrict__ x, int8_t* __restrict__ q1,
                                     int8_t* __restrict__ q2, float4* __restrict__ scales,
                                     int64_t n_blocks) {
  pdl_trigger();
  pdl_wait();
  const int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (b >= n_blocks) return;
  quant_block32(x[b * 32 + lane], lane, b, q1, q2, scales);
}

// The one-token kernel, by split.
template <DType T, int kMin, bool kStream>
cudaError_t launch_plain_as(const GemvBatch& b, const QuantizedActs& xa, int split,
                            cudaStream_t s) {
  const dim3 grid(b.block_end[b.n_jobs - 1]), block(kWarps * 32);
  return split == 4 ? launch_pdl(gemv_int8_kernel<T, 1, 4, kMin, kStream>, grid, block, 0, s, b, xa)
         : split == 2
             ? launch_pdl(gemv_int8_kernel<T, 1, 2, kMin, kStream>, grid, block, 0, s, b, xa)
             : launch_pdl(gemv_int8_kernel<T, 1, 1, kMin, kStream>, grid, block, 0, s, b, xa);
}
// Q4_0 streams its weights past L1 (tg128 561 -> 572 tok/s on the H200); Q8_0 lost (441 ->
// 434) and Q4_K did not move (508 -> 507), so they keep the plain loads.
template <DType T, int kMin>
cudaError_t launch_plain(const GemvBatch& b, const QuantizedActs& xa, int split, cudaStream_t s) {
  return launch_plain_as<T, kMin, T == DType::Q4_0>(b, xa, split, s);
}

template <DType T>
cudaError_t gemv_typed(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa, cudaStream_t s) {
  const int64_t nu = xa.cols / QT<T>::kUnit,
                steps = (nu + 32 * QT<T>::kUnroll - 1) / (32 * QT<T>::kUnroll);
  const int split = xa.n_tokens == 1 ? gemv_split(jobs, n_jobs, steps, true) : 1;
  const GemvBatch b = make_gemv_batch(jobs, n_jobs, split);
  const unsigned grid = b.block_end[b.n_jobs - 1];
  switch (xa.n_tokens) {
    case 1:
      if constexpr (T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K) {
        if (gemv_min_blocks(T, grid) == 3) return launch_plain<T, 3>(b, xa, split, s);
      }
      if constexpr (T == DType::Q8_0) {
        if (gemv_min_blocks(T, grid) == 4) return launch_plain<T, 4>(b, xa, split, s);
      }
      return launch_plain<T, 1>(b, xa, split, s);
    case 2:
      return launch_pdl(gemv_int8_kernel<T, 2>, dim3(grid), dim3(kWarps * 32), 0, s, b, xa);
    case 3:
      return launch_pdl(gemv_int8_kernel<T, 3>, dim3(grid), dim3(kWarps * 32), 0, s, b, xa);
    case 4:
      return launch_pdl(gemv_int8_kernel<T, 4>, dim3(grid), dim3(kWarps * 32), 0, s, b, xa);
    default:
      return cudaErrorInvalidValue;
  }
}

size_t align256(size_t v) {
  return (v + 255) / 256 * 256;
}

}  // namespace

bool uses_int8_gemv(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

size_t quantized_acts_bytes(int64_t n_tokens, int64_t cols) {
  const size_t q = align256(size_t(n_tokens) * size_t(cols));
  return 2 * q + align256(size_t(n_tokens) * size_t(cols / 32) * 16);
}

cudaError_t launch_quantize_acts(const float* x, int64_t n_tokens, int64_t cols, void* buf,
                                 QuantizedActs* out, cudaStream_t s) {
  if (cols % 32 != 0 || n_tokens <= 0 || !buf) return cudaErrorInvalidValue;
  const QuantizedActs v = quantized_acts_view(buf, n_tokens, cols);
  const int64_t nb = n_tokens * cols / 32;
  const unsigned grid = unsigned((nb + kWarps - 1) / kWarps);
  *out = v;
  return launch_pdl(quantize_acts_kernel, dim3(grid), dim3(kWarps * 32), 0, s, x,
                    const_cast<int8_t*>(v.q1), const_cast<int8_t*>(v.q2),
                    reinterpret_cast<float4*>(const_cast<float*>(v.scales)), nb);
}

QuantizedActs quantized_acts_view(void* buf, int64_t n_tokens, int64_t cols) {
  auto* base = static_cast<uint8_t*>(buf);
  const size_t q = align256(size_t(n_tokens) * size_t(cols));
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const int8_t*>(base + q),
          reinterpret_cast<const float*>(base + 2 * q), n_tokens, cols};
}

GemvBatch make_gemv_batch(const GemvJob* jobs, int n_jobs, int split) {
  GemvBatch b;
  b.n_jobs = n_jobs;
  const int64_t rows_per_block = kGemvRowsPerBlock / split;
  unsigned end = 0;
  for (int i = 0; i < 3; ++i) {
    if (i < n_jobs) {
      b.jobs[i] = jobs[i];
      end += unsigned((jobs[i].w.rows + rows_per_block - 1) / rows_per_block);
    }
    b.block_end[i] = end;
  }
  return b;
}

int gemv_min_blocks(DType t, int64_t grid_blocks) {
  // Q4_K at 80 registers instead of 94 (no spills) fits 3 blocks per SM instead of 2: faster
  // for grids of several waves (11008x4096: 1.85 -> 2.06 TB/s on the H200), slower for one
  // wave (4096x4096: 1.51 -> 1.42). Q5_K (116 bytes of spills) and Q6_K (16-24) stay.
  // Q8_0 at 64 registers instead of 94 (no spills) fits 4 blocks per SM instead of 2: ncu showed
  // its warps stalled on memory at 25% occupancy; with the split below, tg128 392 -> 438 tok/s
  // (session 9). Q4_0 at 64 spills, and at 80 (3 blocks) it lost (557 -> 554).
  if (t == DType::Q8_0) return 4;
  return t == DType::Q4_K && grid_blocks > 512 ? 3 : 1;
}

int gemv_split(const GemvJob* jobs, int n_jobs, int64_t steps, bool int8) {
  // Measured on the H200 (docs/performance-cuda.md, session 8): the float GEMV gains from
  // splitting (F16 4096x11008 2.5 -> 3.4 TB/s; F16 tg128 225 -> 246 with grids up to 4096
  // blocks, so gate/up splits too).
  constexpr int kMaxFloat = 4;
  constexpr int64_t kMaxBlocks = 4096;
  // The int8 kernels split only where 4 blocks fit per SM (Q8_0 at 64 registers, above): split
  // 2 took Q8_0 4096x4096 from 2.49 to 2.74 TB/s; at 2 blocks per SM a split only lengthens the
  // grid (Q4_0 4096x11008 2.36 -> 2.02).
  const int int8_cap = jobs[0].w.dtype == DType::Q8_0 ? 2 : 1;
  const int cap = int8 ? int8_cap : kMaxFloat;
  int64_t blocks = 0;
  for (int i = 0; i < n_jobs; ++i)
    blocks += (jobs[i].w.rows + kGemvRowsPerBlock - 1) / kGemvRowsPerBlock;
  int split = 1;
  while (split < 8 && 2 * split <= cap && 2 * split <= steps && blocks * split < kMaxBlocks)
    split *= 2;
  return split;
}

cudaError_t launch_gemv_int8(const DeviceWeight& w, const QuantizedActs& xa, float* y,
                             cudaStream_t s) {
  const GemvJob job{w, y, nullptr};
  return launch_gemv_int8_multi(&job, 1, xa, s);
}

cudaError_t launch_gemv_int8_multi(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa,
                                   cudaStream_t s) {
  if (n_jobs < 1 || n_jobs > 3 || xa.n_tokens < 1 || xa.n_tokens > kGemvMaxTokens)
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.cols != xa.cols || jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.rows <= 0)
      return cudaErrorInvalidValue;
  static_assert(kWarps * kRows == kGemvRowsPerBlock, "block ranges assume this many rows");
  switch (jobs[0].w.dtype) {
    case DType::Q4_0:
      return gemv_typed<DType::Q4_0>(jobs, n_jobs, xa, s);
    case DType::Q4_1:
      return gemv_typed<DType::Q4_1>(jobs, n_jobs, xa, s);
    case DType::Q5_0:
      return gemv_typed<DType::Q5_0>(jobs, n_jobs, xa, s);
    case DType::Q5_1:
      return gemv_typed<DType::Q5_1>(jobs, n_jobs, xa, s);
    case DType::Q8_0:
      return gemv_typed<DType::Q8_0>(jobs, n_jobs, xa, s);
    case DType::Q4_K:
      return gemv_typed<DType::Q4_K>(jobs, n_jobs, xa, s);
    case DType::Q5_K:
      return gemv_typed<DType::Q5_K>(jobs, n_jobs, xa, s);
    case DType::Q6_K:
      return gemv_typed<DType::Q6_K>(jobs, n_jobs, xa, s);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace hearth::cuda
