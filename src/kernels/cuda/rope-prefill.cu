// Rotary embedding for prefill rows: one block per token computes the token's cos/sin once per
// pair (double angles, the same values as rope.cu) into shared memory, and rotates every head
// of the row with them: head_dim/2 sincos per token instead of n_heads * head_dim/2.
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/rope-pair.cuh"

namespace hearth::cuda {

namespace {

__global__ void rope_rows_kernel(float* x, int64_t n_heads, int64_t head_dim,
                                 const int32_t* __restrict__ pos,
                                 const float* __restrict__ inv_freq, int style) {
  extern __shared__ float2 cs[];  // [head_dim / 2]: (cos, sin)
  const int64_t t = blockIdx.x;
  const int64_t half = head_dim / 2;
  const double p = double(pos[t]);
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    double sd, cd;
    sincos(p * double(inv_freq[j]), &sd, &cd);
    cs[j] = make_float2(float(cd), float(sd));
  }
  __syncthreads();
  float* row = x + t * n_heads * head_dim;
  for (int64_t idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
    const int64_t h = idx / half, i = idx % half;
    rope_rotate_pair(row + h * head_dim, i, half, style, cs[i].x, cs[i].y);
  }
}

}  // namespace

cudaError_t launch_rope_rows(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                             const int32_t* pos, const float* inv_freq, int style, cudaStream_t s) {
  if (n_tokens <= 0 || n_heads <= 0) return cudaSuccess;
  if (head_dim <= 0 || head_dim % 2 != 0 || n_tokens > 0x7fffffff) return cudaErrorInvalidValue;
  const size_t smem = size_t(head_dim / 2) * sizeof(float2);
  rope_rows_kernel<<<unsigned(n_tokens), 256, smem, s>>>(x, n_heads, head_dim, pos, inv_freq,
                                                         style);
  return cudaGetLastError();
}

}  // namespace hearth::cuda
