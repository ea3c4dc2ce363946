// Attention with an AttentionMask (ops.h) on CUDA: sliding window, score soft-cap, ring cache and
// sinks over typed cache rows (kv-rows.cuh), for decode and prefill alike. One block per (token,
// head); its warps take the visible keys in turn, each with its own online softmax, merged at the
// end. Plain and unsplit on purpose: the Llama path keeps attention.cu's tuned kernels, masked
// layers (Gemma 2/3, sliding windows) come here. A new mask field: its test in `visible` / the
// score line below.
#include <cmath>

#include "kernels/cuda/attention-softmax.cuh"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxEpt = 8;  // elements per lane: head_dim <= 32 * kMaxEpt = 256

// q [T, n_heads, hd], out likewise; k/v cache rows of n_kv_heads * hd elements of kv's types,
// position p in row p % ring_rows (ring_rows 0: row p). pos0 from pos0_dev when set (a captured
// decode step).
template <KvForm F>
__global__ void __launch_bounds__(kWarps * 32)
    attention_masked_kernel(const float* __restrict__ q, const uint8_t* __restrict__ k,
                            const uint8_t* __restrict__ v, float* __restrict__ out,
                            int64_t pos0_host, const int32_t* pos0_dev, int64_t n_heads,
                            int64_t n_kv_heads, int64_t hd, float scale, int64_t window,
                            float softcap, int64_t ring_rows, AttnKv kv) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const int64_t kvh = h / (n_heads / n_kv_heads), stride = n_kv_heads * hd;
  const int64_t pos0 = pos0_dev ? int64_t(*pos0_dev) : pos0_host;
  const int64_t last = pos0 + t;
  const int64_t first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* qr = q + (t * n_heads + h) * hd;
  float qv[kMaxEpt], acc[kMaxEpt];
#pragma unroll
  for (int j = 0; j < kMaxEpt; ++j) {
    const int64_t d = j * 32 + lane;
    qv[j] = d < hd ? qr[d] : 0.f;
    acc[j] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t p = first + warp; p <= last; p += kWarps) {
    const int64_t row = ring_rows > 0 ? p % ring_rows : p;
    const int64_t e0 = row * stride + kvh * hd;
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxEpt; ++j) {
      const int64_t d = j * 32 + lane;
      if (d < hd) dot = fmaf(qv[j], kv_load<F>(k, e0 + d, kv.k), dot);
    }
    float s = warp_sum(dot) * scale;
    if (softcap > 0.f) s = softcap * tanhf(s / softcap);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), e = expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (int j = 0; j < kMaxEpt; ++j) {
      const int64_t d = j * 32 + lane;
      if (d < hd) acc[j] = acc[j] * corr + e * kv_load<F>(v, e0 + d, kv.v);
    }
    m = m_new;
  }
  // Merge the warps' partial softmaxes (a warp that saw no key has m = -inf, l = 0).
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kMaxEpt * 32];
  if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
  for (int j = 0; j < kMaxEpt; ++j) s_acc[warp][j * 32 + lane] = acc[j];
  __syncthreads();
  if (warp != 0) return;
  float mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w]);
  float f[kWarps], total = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += s_l[w] * (f[w] = expf(s_m[w] - mx));
  const float inv = softmax_out_factor(mx, total, kv.sinks, int(h));
  float* o = out + (t * n_heads + h) * hd;
#pragma unroll
  for (int j = 0; j < kMaxEpt; ++j) {
    const int64_t d = j * 32 + lane;
    if (d >= hd) continue;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += s_acc[w][d] * f[w];
    o[d] = sum * inv;
  }
}

}  // namespace

cudaError_t launch_attention_masked(const float* q, const void* k_cache, const void* v_cache,
                                    float* out, int64_t n_tokens, int64_t pos0,
                                    const int32_t* pos0_dev, int64_t n_heads, int64_t n_kv_heads,
                                    int64_t head_dim, float scale, int64_t window, float softcap,
                                    int64_t ring_rows, cudaStream_t s, const AttnKv& kv) {
  if (n_tokens <= 0 || n_heads <= 0) return cudaSuccess;
  if (head_dim <= 0 || head_dim > 32 * kMaxEpt || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 ||
      window < 0 || ring_rows < 0 ||
      (ring_rows > 0 && (window == 0 || ring_rows < window + n_tokens - 1)) ||
      !is_cuda_kv_type(kv.k) || !is_cuda_kv_type(kv.v) ||
      ((kv.k == DType::Q8_0 || kv.v == DType::Q8_0) && head_dim % 32 != 0))
    return cudaErrorInvalidValue;
  const int64_t blocks = n_tokens * n_heads;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  cudaError_t err = cudaSuccess;
  dispatch_kv_form(kv.k, kv.v, [&](auto form) {
    err = launch_pdl(attention_masked_kernel<decltype(form)::value>, dim3(unsigned(blocks)),
                     dim3(kWarps * 32), 0, s, q, static_cast<const uint8_t*>(k_cache),
                     static_cast<const uint8_t*>(v_cache), out, pos0, pos0_dev, n_heads, n_kv_heads,
                     head_dim, scale, window, softcap, ring_rows, kv);
  });
  return err;
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
