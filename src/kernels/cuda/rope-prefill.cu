// Rotary embedding for prefill rows: one block per token computes the token's cos/sin once per
// pair (double angles, the same values as rope.cu) into shared memory, and rotates every head
// of the row with them: head_dim/2 sincos per token instead of n_heads * head_dim/2. The _kv form
// (rope q, rope k and both K/V stores in one launch) reads the angles from a table the backend
// computes once per prefill pass (every layer rotates by the same positions).
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/rope-pair.cuh"

namespace hearth::cuda {

namespace {

// cs[j] = (cos, sin) of token t's angle for pair j, for the whole block.
__device__ __forceinline__ void token_angles(float2* cs, int64_t half, int32_t pos,
                                             const float* __restrict__ inv_freq) {
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) cs[j] = rope_cos_sin(pos, inv_freq[j]);
  __syncthreads();
}

// Rotates every head of one token's row.
__device__ __forceinline__ void rotate_row(float* row, int64_t n_heads, int64_t head_dim,
                                           const float2* cs, int style) {
  const int64_t half = head_dim / 2;
  for (int64_t idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
    const int64_t h = idx / half, i = idx % half;
    rope_rotate_pair(row + h * head_dim, i, half, style, cs[i].x, cs[i].y);
  }
}

__global__ void rope_rows_kernel(float* x, int64_t n_heads, int64_t head_dim,
                                 const int32_t* __restrict__ pos,
                                 const float* __restrict__ inv_freq, int style) {
  extern __shared__ float2 cs[];  // [head_dim / 2]: (cos, sin)
  const int64_t t = blockIdx.x;
  token_angles(cs, head_dim / 2, pos[t], inv_freq);
  rotate_row(x + t * n_heads * head_dim, n_heads, head_dim, cs, style);
}

// cs[t * half + j] = (cos, sin) of pos[t] * inv_freq[j].
__global__ void rope_angles_kernel(float2* cs, int64_t n_tokens, int64_t half,
                                   const int32_t* __restrict__ pos,
                                   const float* __restrict__ inv_freq) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n_tokens * half;
       idx += int64_t(gridDim.x) * blockDim.x) {
    cs[idx] = rope_cos_sin(pos[idx / half], inv_freq[idx % half]);
  }
}

// Prefill rope + KV append from an angle table (rope_angles_kernel): one thread per kPairs
// neighbouring pairs of q and k across all tokens and heads (k's also stored to k_cache row
// cache_pos + t), then v's rows copied to v_cache (rows of nk*head_dim), as f32 or f16 (Row).
// kPairs 2: 16-byte accesses (the launcher checks head_dim % 4 and alignment), else one pair a
// thread. 32-bit indices: the launcher checks the counts. Null caches: rotate only (bf16 and
// q8_0 caches take their rows from launch_store_kv after it).
template <int kPairs, class Row>
__global__ void rope_rows_kv_kernel(float* q, int nq, float* k, int nk, int head_dim,
                                    unsigned n_tokens, const float2* __restrict__ cs, int style,
                                    Row* k_cache, Row* v_cache, const float* __restrict__ v,
                                    int64_t cache_pos) {
  const unsigned half = unsigned(head_dim) / 2, units = half / kPairs;
  const unsigned units_q = unsigned(nq) * units, per_token = units_q + unsigned(nk) * units;
  const unsigned kv_row = unsigned(nk * head_dim);
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n_tokens * per_token;
       idx += stride) {
    const unsigned t = idx / per_token, r = idx % per_token;
    const bool is_q = r < units_q;
    const unsigned rr = is_q ? r : r - units_q, h = rr / units, i = (rr % units) * kPairs;
    float* row;
    Row* copy_to = nullptr;
    if (is_q) {
      row = q + (size_t(t) * unsigned(nq) + h) * unsigned(head_dim);
    } else {
      const size_t off = size_t(t) * kv_row + size_t(h) * unsigned(head_dim);
      row = k + off;
      if (k_cache) copy_to = k_cache + size_t(cache_pos) * kv_row + off;
    }
    if constexpr (kPairs == 2) {
      const float4 c = *reinterpret_cast<const float4*>(cs + t * half + i);
      rope_rotate_two_pairs(row, i, half, style, c, copy_to);
    } else {
      const float2 c = cs[t * half + i];
      rope_rotate_pair(row, i, half, style, c.x, c.y, copy_to);
    }
  }
  if (!v_cache) return;
  Row* dst = v_cache + size_t(cache_pos) * kv_row;
  const unsigned n = n_tokens * kv_row;
  if constexpr (kPairs == 2) {
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n / 4; idx += stride)
      store_row4(dst + 4 * size_t(idx), reinterpret_cast<const float4*>(v)[idx]);
  } else {
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride)
      dst[idx] = cache_value(v[idx], dst);
  }
}

template <class Row>
void launch_rows_kv(bool vec, unsigned blocks, cudaStream_t s, float* q, int64_t nq, float* k,
                    int64_t nk, int64_t head_dim, int64_t n_tokens, const float2* angles, int style,
                    Row* kc, Row* vc, const float* v, int64_t cache_pos) {
  if (vec)
    rope_rows_kv_kernel<2, Row><<<blocks, 256, 0, s>>>(q, int(nq), k, int(nk), int(head_dim),
                                                       unsigned(n_tokens), angles, style, kc, vc, v,
                                                       cache_pos);
  else
    rope_rows_kv_kernel<1, Row><<<blocks, 256, 0, s>>>(q, int(nq), k, int(nk), int(head_dim),
                                                       unsigned(n_tokens), angles, style, kc, vc, v,
                                                       cache_pos);
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

size_t rope_angles_bytes(int64_t n_tokens, int64_t head_dim) {
  return size_t(n_tokens) * size_t(head_dim / 2) * sizeof(float2);
}

cudaError_t launch_rope_angles(float* cs, int64_t n_tokens, int64_t head_dim, const int32_t* pos,
                               const float* inv_freq, cudaStream_t s) {
  if (n_tokens <= 0) return cudaSuccess;
  if (head_dim <= 0 || head_dim % 2 != 0) return cudaErrorInvalidValue;
  const int64_t n = n_tokens * (head_dim / 2);
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  rope_angles_kernel<<<unsigned(blocks), 256, 0, s>>>(reinterpret_cast<float2*>(cs), n_tokens,
                                                      head_dim / 2, pos, inv_freq);
  return cudaGetLastError();
}

cudaError_t launch_rope_rows_kv(float* q, int64_t nq, float* k, int64_t nk, int64_t head_dim,
                                int64_t n_tokens, const float* cs, int style, void* k_cache,
                                void* v_cache, const float* v, int64_t cache_pos, cudaStream_t s,
                                const AttnKv& kv) {
  if (n_tokens <= 0) return cudaSuccess;
  if (head_dim <= 0 || head_dim % 2 != 0 || nq <= 0 || nk <= 0 || cache_pos < 0)
    return cudaErrorInvalidValue;
  // The kernel's 32-bit indices: every per-call element count must fit.
  const int64_t per_token = (nq + nk) * (head_dim / 2), kv_row = nk * head_dim;
  if (n_tokens * per_token > 0x7fffffff || n_tokens * kv_row > 0x7fffffff ||
      nq * head_dim > 0x7fffffff)
    return cudaErrorInvalidValue;
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const bool vec = head_dim % 4 == 0 && aligned(q) && aligned(k) && aligned(k_cache) &&
                   aligned(v_cache) && aligned(v) && aligned(cs);
  const int64_t blocks =
      std::min<int64_t>((n_tokens * per_token / (vec ? 2 : 1) + 255) / 256, 4096);
  const auto* angles = reinterpret_cast<const float2*>(cs);
  // f32 and f16 caches take the rows inside the rope launch (with an f16 cache, two store
  // launches after it read k and v again: 1.16 ms of a 512-token 7B prefill on an H100, the
  // three launches); bf16 and q8_0 ones are stored after it.
  const bool f32 = kv.k == DType::F32 && kv.v == DType::F32;
  const bool f16 = kv.k == DType::F16 && kv.v == DType::F16;
  if (f16)
    launch_rows_kv(vec, unsigned(blocks), s, q, nq, k, nk, head_dim, n_tokens, angles, style,
                   static_cast<__half*>(k_cache), static_cast<__half*>(v_cache), v, cache_pos);
  else
    launch_rows_kv(vec, unsigned(blocks), s, q, nq, k, nk, head_dim, n_tokens, angles, style,
                   f32 ? static_cast<float*>(k_cache) : nullptr,
                   f32 ? static_cast<float*>(v_cache) : nullptr, v, cache_pos);
  cudaError_t err = cudaGetLastError();
  if (f32 || f16 || err != cudaSuccess) return err;
  err = launch_store_kv(k_cache, kv.k, k, nullptr, cache_pos, kv_row, n_tokens, 0, s);
  if (err != cudaSuccess) return err;
  return launch_store_kv(v_cache, kv.v, v, nullptr, cache_pos, kv_row, n_tokens, 0, s);
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
