// The decode GEMVs' epilogues (gemv-int8.cu and matmul.cu): the warp-reduced row stores with the
// fused residual add, and the rmsnorm epilogue: the last block of a GEMV + residual-add grid
// normalises the updated residual row for the next layer's GEMVs.
// An experiment (HEARTH_CUDA_FUSE_NORM=1): measured ~8 us slower per launch in the decode graph
// than a separate rmsnorm kernel, which PDL overlaps almost entirely.
// Same arithmetic as rmsnorm.cu / fused.cu (fused and unfused outputs agree bit for bit).
#pragma once

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

// acc[r][t]: lane partial sums of row row0 + r for token t. Lane 0 stores each warp-summed row
// (and adds it into the residual `add` when given: same lane, no race).
template <int kRows, int NT>
__device__ __forceinline__ void store_gemv_rows(const float (&acc)[kRows][NT], int lane,
                                                int64_t row0, int64_t d, float* __restrict__ y,
                                                float* add) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && row0 + r < d) {
        y[t * d + row0 + r] = v;
        if (add) add[t * d + row0 + r] += v;
      }
    }
}

// kSplit > 1: the kSplit warps of a row group each summed every kSplit-th step of the same rows
// (warp = group * kSplit + part). Each leaves its warp sums in shared memory; the group's first
// warp adds them in part order and stores. Every warp of the block must call it (a barrier).
template <int kSplit, int kWarps, int kRows, int NT>
__device__ __forceinline__ void store_gemv_rows_split(const float (&acc)[kRows][NT], int warp,
                                                      int lane, int64_t row0, int64_t d,
                                                      float* __restrict__ y, float* add) {
  if constexpr (kSplit == 1) {
    store_gemv_rows<kRows, NT>(acc, lane, row0, d, y, add);
  } else {
    __shared__ float part[kWarps][kRows][NT];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[r][t]);
        if (lane == 0) part[warp][r][t] = v;
      }
    __syncthreads();
    if (warp % kSplit != 0 || lane != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float v = part[warp][r][t];
#pragma unroll
        for (int k = 1; k < kSplit; ++k) v += part[warp + k][r][t];
        if (row0 + r < d) {
          y[t * d + row0 + r] = v;
          if (add) add[t * d + row0 + r] += v;
        }
      }
  }
}

// Elements per thread per pass: every load of a pass is issued before the first use, so the
// single block pays one L2 round trip per pass instead of one per element (a loop of
// dependent loads made this epilogue ~15 us, slower than the launch it saves).
constexpr int kNormPer = 8;  // 16 took the pipelined GEMV past 128 registers

// Called by every thread of every block of the grid after its stores. x: the residual row of n
// floats the grid just added into; the block that finishes last (a device counter, left at
// zero again) writes nm.y = x * rsqrt(mean(x^2) + eps) * nm.w and, with nm.q1, its int8
// activations (kQuant; act-quant.cuh's quant_block32, kNormPer blocks per warp at once).
template <int kThreads, bool kQuant>
__device__ __forceinline__ void gemv_norm_epilogue(const GemvNorm& nm, const float* x, int64_t n) {
  __shared__ unsigned s_last;
  __shared__ float partial[kThreads / 32];
  // Hand-off: this block's stores visible device-wide before it is counted.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(nm.counter, 1u) == gridDim.x - 1 ? 1u : 0u;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int64_t kPass = int64_t(kThreads) * kNormPer;
  // Sum of squares in rmsnorm.cu's order: thread t adds t, t + kThreads, t + 2 kThreads, ...
  float ss = 0.f;
  for (int64_t base = 0; base < n; base += kPass) {
    float v[kNormPer];
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int64_t i = base + threadIdx.x + int64_t(k) * kThreads;
      v[k] = i < n ? __ldcg(x + i) : 0.f;  // written by other blocks: from L2, not L1
    }
#pragma unroll
    for (int k = 0; k < kNormPer; ++k)
      if (base + threadIdx.x + int64_t(k) * kThreads < n) ss = fmaf(v[k], v[k], ss);
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) partial[warp] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  const float scale = rsqrtf(total / float(n) + nm.eps);
  auto* scales = reinterpret_cast<float4*>(nm.scales);
  for (int64_t base = 0; base < n; base += kPass) {
    float y[kNormPer];
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int64_t i = base + threadIdx.x + int64_t(k) * kThreads;
      y[k] = i < n ? __ldcg(x + i) * scale * __ldg(nm.w + i) : 0.f;
    }
#pragma unroll
    for (int k = 0; k < kNormPer; ++k) {
      const int64_t i = base + threadIdx.x + int64_t(k) * kThreads;
      if (i < n) nm.y[i] = y[k];
    }
    if constexpr (kQuant) {
      // Element base + warp*32 + k*kThreads + lane: warp-uniform 32-element blocks (n % 32 == 0).
      float a[kNormPer], d1[kNormPer], r[kNormPer], d2[kNormPer];
      int i1[kNormPer], i2[kNormPer], s1[kNormPer];
#pragma unroll
      for (int k = 0; k < kNormPer; ++k) a[k] = fabsf(y[k]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < kNormPer; ++k)
          a[k] = fmaxf(a[k], __shfl_xor_sync(0xffffffffu, a[k], o));
#pragma unroll
      for (int k = 0; k < kNormPer; ++k) {
        d1[k] = a[k] / 127.f;
        i1[k] = d1[k] > 0.f ? max(-127, min(127, __float2int_rn(y[k] / d1[k]))) : 0;
        r[k] = y[k] - d1[k] * float(i1[k]);
        a[k] = fabsf(r[k]);
        s1[k] = i1[k];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < kNormPer; ++k) {
          a[k] = fmaxf(a[k], __shfl_xor_sync(0xffffffffu, a[k], o));
          s1[k] += __shfl_xor_sync(0xffffffffu, s1[k], o);
        }
#pragma unroll
      for (int k = 0; k < kNormPer; ++k) {
        d2[k] = a[k] / 127.f;
        i2[k] = d2[k] > 0.f ? max(-127, min(127, __float2int_rn(r[k] / d2[k]))) : 0;
        const int64_t b0 = base + int64_t(warp) * 32 + int64_t(k) * kThreads;
        if (b0 < n) {
          nm.q1[b0 + lane] = int8_t(i1[k]);
          nm.q2[b0 + lane] = int8_t(i2[k]);
          if (lane == 0) scales[b0 / 32] = make_float4(d1[k], d2[k], 0.f, d1[k] * float(s1[k]));
        }
      }
    }
  }
  if (threadIdx.x == 0) *nm.counter = 0u;
}

}  // namespace hearth::cuda
