// rsqrt(mean(x^2) + eps) of one row, reduced across a block of kThreads: the one definition
// rmsnorm.cu and fused.cu share, so fused and unfused outputs agree bit for bit.
#pragma once

#include <cstdint>

namespace hearth::cuda {

// Every thread of the block calls it (it synchronises the block) and gets the same scale.
template <int kThreads>
__device__ __forceinline__ float block_rms_scale(const float* __restrict__ xr, int64_t n,
                                                 float eps) {
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) ss = fmaf(xr[i], xr[i], ss);
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  __shared__ float partial[kThreads / 32];
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  return rsqrtf(total / float(n) + eps);
}

}  // namespace hearth::cuda
