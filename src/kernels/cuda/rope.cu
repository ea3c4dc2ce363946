// Rotary position embedding on CUDA, both pair layouts (ops.h RopeStyle), full or partial
// (rope_partial: the first n_rot dims, times an attention factor). One thread per (token, head,
// pair); angles in double as on the CPU, since at positions in the thousands a float angle
// drifts visibly in the logits.
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope-pair.cuh"

namespace hearth::cuda {

namespace {

// Pairs [0, half) of each (token, head) row of x rotated by cos and sin times mscale (1 for
// plain rope, a constant the compiler folds away).
__device__ __forceinline__ void rope_rows(float* x, int64_t n_tokens, int64_t n_heads,
                                          int64_t head_dim, int64_t half, const int32_t* pos,
                                          const float* inv_freq, int style, float mscale) {
  const int64_t total = n_tokens * n_heads * half;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, th = idx / half, t = th / n_heads;
    const float2 cs = rope_cos_sin(pos[t], inv_freq[i]);
    rope_rotate_pair(x + th * head_dim, i, half, style, cs.x * mscale, cs.y * mscale);
  }
}

__global__ void rope_kernel(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                            int style) {
  rope_rows(x, n_tokens, n_heads, head_dim, head_dim / 2, pos, inv_freq, style, 1.f);
}

// Pairs of the first n_rot dims only, cos and sin times mscale (as the CPU's rotate()).
__global__ void rope_partial_kernel(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                    int64_t n_rot, const int32_t* __restrict__ pos,
                                    const float* __restrict__ inv_freq, int style, float mscale) {
  pdl_trigger();
  pdl_wait();
  rope_rows(x, n_tokens, n_heads, head_dim, n_rot / 2, pos, inv_freq, style, mscale);
}

// Grid-stride launches: a thread per pair up to 65535 blocks of 256.
unsigned rope_blocks(int64_t pairs) {
  const int64_t blocks = (pairs + 255) / 256;
  return unsigned(blocks > 65535 ? 65535 : blocks);
}

}  // namespace

cudaError_t launch_rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                int64_t n_rot, const int32_t* pos, const float* inv_freq, int style,
                                float mscale, cudaStream_t s) {
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim) return cudaErrorInvalidValue;
  const int64_t total = n_tokens * n_heads * (n_rot / 2);
  if (total <= 0) return cudaSuccess;
  return launch_pdl(rope_partial_kernel, dim3(rope_blocks(total)), dim3(256), 0, s, x, n_tokens,
                    n_heads, head_dim, n_rot, pos, inv_freq, style, mscale);
}

cudaError_t launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                        const int32_t* pos, const float* inv_freq, int style, cudaStream_t s) {
  const int64_t total = n_tokens * n_heads * (head_dim / 2);
  if (total <= 0) return cudaSuccess;
  rope_kernel<<<rope_blocks(total), 256, 0, s>>>(x, n_tokens, n_heads, head_dim, pos, inv_freq,
                                                 style);
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
