// rsqrt(mean(x^2) + eps) of one row, reduced across a block of kThreads: the one definition
// rmsnorm.cu and fused.cu share, so fused and unfused outputs agree bit for bit.
#pragma once

#include <cstdint>

namespace hearth::cuda {

// rsqrt(mean + eps) of a row from each thread's partial sum of squares ss: the warps' sums
// through `partial` (kThreads / 32 floats of shared memory, not reused until the block syncs
// again), added in warp order. Every thread of the block calls it and gets the same scale.
template <int kThreads>
__device__ __forceinline__ float block_rms_of_sums(float ss, int64_t n, float eps, float* partial) {
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  return rsqrtf(total / float(n) + eps);
}

// Every thread of the block calls it (it synchronises the block) and gets the same scale.
// kVec: the row's loads go out four 16-byte words per thread at once (decode rows, below);
// without, a plain strided loop (prefill blocks, one per row, where that measured faster).
template <int kThreads, bool kVec = true>
__device__ __forceinline__ float block_rms_scale(const float* __restrict__ xr, int64_t n,
                                                 float eps) {
  float ss = 0.f;
  int64_t done = 0;
  // Four 16-byte loads per thread in flight before the first is used: the row (just written by
  // the previous kernel, in L2) costs one round trip per 16 * kThreads elements. A scalar
  // strided loop waited once per few kThreads elements, several L2 round trips a decode row.
  if (kVec && (reinterpret_cast<uintptr_t>(xr) & 15) == 0) {
    constexpr int kDepth = 4;
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const int64_t n4 = n / 4;
    for (int64_t base = 0; base < n4; base += kDepth * kThreads) {
      float4 v[kDepth];
#pragma unroll
      for (int k = 0; k < kDepth; ++k) {
        const int64_t i = base + k * kThreads + threadIdx.x;
        v[k] = i < n4 ? x4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int k = 0; k < kDepth; ++k) {
        ss = fmaf(v[k].x, v[k].x, ss);
        ss = fmaf(v[k].y, v[k].y, ss);
        ss = fmaf(v[k].z, v[k].z, ss);
        ss = fmaf(v[k].w, v[k].w, ss);
      }
    }
    done = n4 * 4;
  }
  for (int64_t i = done + threadIdx.x; i < n; i += kThreads) ss = fmaf(xr[i], xr[i], ss);
  __shared__ float partial[kThreads / 32];
  return block_rms_of_sums<kThreads>(ss, n, eps, partial);
}

// block_rms_scale<kThreads>'s value for a row of n <= 4 * kThreads floats (n % 4 == 0, xr
// 16-byte aligned) from one warp: the same fma chains over the same 16-byte words, the same
// butterflies and the warps' partials added in the same order, so a per-head norm done inside
// another kernel (the decode attention's) gives the separate launch's bits. Every lane gets it.
__device__ __forceinline__ float warp_rms_scale(const float* __restrict__ xr, int n, float eps,
                                                int lane) {
  const float4* x4 = reinterpret_cast<const float4*>(xr);
  const int n4 = n / 4;
  float total = 0.f;
  for (int w0 = 0; w0 < n4; w0 += 32) {  // the words block_rms_scale's warp w0 / 32 holds
    float ss = 0.f;
    if (w0 + lane < n4) {
      const float4 v = x4[w0 + lane];
      ss = fmaf(v.x, v.x, ss);
      ss = fmaf(v.y, v.y, ss);
      ss = fmaf(v.z, v.z, ss);
      ss = fmaf(v.w, v.w, ss);
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    total += ss;
  }
  return rsqrtf(total / float(n) + eps);
}

}  // namespace hearth::cuda
