// Causal attention on CUDA over the f32 KV cache [ctx, n_kv_heads, head_dim] (ops.h).
// Decode / small batches: split-K over the context (one block per (query, head, 64-position
// chunk), each warp an online softmax) plus a combine pass. Prefill: flash-style tiles of 16
// queries x 32 keys in shared memory, K/V read once per tile. head_dim <= 256.
#include <cmath>

#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/cuda-ops.h"

namespace hearth::cuda {

namespace {

constexpr int kChunk = 64;      // context positions per split (short decode contexts still
                                // spread over several blocks per head)
constexpr int kSplitWarps = 8;  // warps per split block
constexpr int kFlashQ = 16;     // queries per flash block (4 warps x kQW)
constexpr int kQW = 4;          // queries per warp
constexpr int kFlashK = 32;     // keys per shared-memory tile (one per lane)
constexpr int64_t kFlashMinTokens = 8;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// exp(a - b) that is 0, not NaN, when both are -inf (an empty running max).
__device__ __forceinline__ float exp_diff(float a, float b) {
  return a == -INFINITY ? 0.f : __expf(a - b);
}

// Partial for (query t, head h, split): [m, l, acc[hd]] with acc unnormalised relative to m.
template <int EPT>
__global__ void __launch_bounds__(kSplitWarps * 32)
    attn_split_kernel(const float* __restrict__ q, const float* __restrict__ kc,
                      const float* __restrict__ vc, float* __restrict__ partials, int64_t pos0_host,
                      const int32_t* pos0_dev, int n_heads, int n_kv_heads, int hd, float scale) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t th = blockIdx.x;
  const int split = blockIdx.y, n_splits = gridDim.y;
  const int64_t t = th / n_heads;
  const int h = int(th % n_heads);
  const int kvh = h / (n_heads / n_kv_heads);
  const int64_t pos0 = pos0_dev ? int64_t(*pos0_dev) : pos0_host;
  const int64_t n_ctx = pos0 + t + 1;
  const int64_t start = int64_t(split) * kChunk;
  const int64_t end = start + kChunk < n_ctx ? start + kChunk : n_ctx;
  const int64_t kv_stride = int64_t(n_kv_heads) * hd;

  float qv[EPT], acc[EPT];
#pragma unroll
  for (int i = 0; i < EPT; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < hd ? q[th * hd + d] * scale : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t base = start + warp * 4; base < end; base += kSplitWarps * 4) {
    float s[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t p = base + j;
      float part = 0.f;
      if (p < end) {
        const float* kr = kc + p * kv_stride + int64_t(kvh) * hd;
#pragma unroll
        for (int i = 0; i < EPT; ++i) {
          const int d = lane + 32 * i;
          if (d < hd) part = fmaf(qv[i], kr[d], part);
        }
      }
      s[j] = p < end ? warp_sum(part) : -INFINITY;
    }
    const float m_new = fmaxf(m, fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3])));
    const float corr = exp_diff(m, m_new);
    l *= corr;
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc[i] *= corr;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t p = base + j;
      if (p >= end) break;
      const float e = __expf(s[j] - m_new);
      l += e;
      const float* vr = vc + p * kv_stride + int64_t(kvh) * hd;
#pragma unroll
      for (int i = 0; i < EPT; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) acc[i] = fmaf(e, vr[d], acc[i]);
      }
    }
    m = m_new;
  }
  __shared__ float sm_m[kSplitWarps], sm_l[kSplitWarps];
  __shared__ float sm_acc[kSplitWarps][EPT * 32];
  if (lane == 0) sm_m[warp] = m, sm_l[warp] = l;
#pragma unroll
  for (int i = 0; i < EPT; ++i) sm_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float big = -INFINITY;
#pragma unroll
  for (int w = 0; w < kSplitWarps; ++w) big = fmaxf(big, sm_m[w]);
  float* out = partials + (th * n_splits + split) * int64_t(hd + 2);
  if (threadIdx.x == 0) {
    float lt = 0.f;
    for (int w = 0; w < kSplitWarps; ++w) lt += sm_l[w] * exp_diff(sm_m[w], big);
    out[0] = big;
    out[1] = lt;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
    for (int w = 0; w < kSplitWarps; ++w) a += sm_acc[w][d] * exp_diff(sm_m[w], big);
    out[2 + d] = a;
  }
}

// qv (optional): q1, q2, scales of the int8 activations of `out` (quantized per 32 dims; a warp
// owns each 32-dim block since hd % 32 == 0 whenever qv is given).
struct QuantOut {
  int8_t* q1 = nullptr;
  int8_t* q2 = nullptr;
  float4* scales = nullptr;
};

__global__ void attn_combine_kernel(const float* __restrict__ partials, float* __restrict__ out,
                                    int n_splits, int hd, QuantOut qo) {
  const int64_t th = blockIdx.x;
  const float* p = partials + th * n_splits * int64_t(hd + 2);
  float big = -INFINITY;
  for (int s = 0; s < n_splits; ++s) big = fmaxf(big, p[s * (hd + 2)]);
  float lt = 0.f;
  for (int s = 0; s < n_splits; ++s) lt += p[s * (hd + 2) + 1] * exp_diff(p[s * (hd + 2)], big);
  const float inv = 1.f / lt;
  if (qo.q1) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int d0 = warp * 32; d0 < hd; d0 += blockDim.x) {  // warp-uniform: whole 32-dim blocks
      const int d = d0 + lane;
      float a = 0.f;
      for (int s = 0; s < n_splits; ++s)
        a += p[s * (hd + 2) + 2 + d] * exp_diff(p[s * (hd + 2)], big);
      const float v = a * inv;
      out[th * hd + d] = v;
      quant_block32(v, lane, (th * hd + d0) / 32, qo.q1, qo.q2, qo.scales);
    }
    return;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
    for (int s = 0; s < n_splits; ++s)
      a += p[s * (hd + 2) + 2 + d] * exp_diff(p[s * (hd + 2)], big);
    out[th * hd + d] = a * inv;
  }
}

// Block = (tile of kFlashQ queries, head); 4 warps x kQW queries; lane j scores key j of a tile.
template <int EPT>
__global__ void __launch_bounds__(128)
    attn_flash_kernel(const float* __restrict__ q, const float* __restrict__ kc,
                      const float* __restrict__ vc, float* __restrict__ out, int64_t n_tokens,
                      int64_t pos0, int n_heads, int n_kv_heads, int hd, float scale) {
  extern __shared__ float4 sm4[];
  float* qs = reinterpret_cast<float*>(sm4);
  float* ks = qs + kFlashQ * hd;
  float* vs = ks + kFlashK * (hd + 4);  // K rows padded by 4 floats: conflict-free row reads
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = blockIdx.y;
  const int kvh = h / (n_heads / n_kv_heads);
  const int64_t tile0 = int64_t(blockIdx.x) * kFlashQ;
  const int64_t kv_stride = int64_t(n_kv_heads) * hd;
  for (int idx = threadIdx.x; idx < kFlashQ * hd; idx += blockDim.x) {
    const int64_t t = tile0 + idx / hd;
    qs[idx] = t < n_tokens ? q[(t * n_heads + h) * hd + idx % hd] * scale : 0.f;
  }
  const int64_t t_last = tile0 + kFlashQ - 1 < n_tokens ? tile0 + kFlashQ - 1 : n_tokens - 1;
  const int64_t kv_end = pos0 + t_last + 1;

  float m[kQW], l[kQW], acc[kQW][EPT];
#pragma unroll
  for (int a = 0; a < kQW; ++a) {
    m[a] = -INFINITY, l[a] = 0.f;
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc[a][i] = 0.f;
  }
  const int hd4 = hd / 4;
  for (int64_t kt0 = 0; kt0 < kv_end; kt0 += kFlashK) {
    __syncthreads();  // the previous tile is consumed (and qs is written on the first pass)
    for (int idx = threadIdx.x; idx < kFlashK * hd4; idx += blockDim.x) {
      const int j = idx / hd4, d4 = idx % hd4;
      const int64_t p = kt0 + j;
      float4 kv4 = make_float4(0.f, 0.f, 0.f, 0.f), vv4 = kv4;
      if (p < kv_end) {
        kv4 = *reinterpret_cast<const float4*>(kc + p * kv_stride + int64_t(kvh) * hd + 4 * d4);
        vv4 = *reinterpret_cast<const float4*>(vc + p * kv_stride + int64_t(kvh) * hd + 4 * d4);
      }
      reinterpret_cast<float4*>(ks + j * (hd + 4))[d4] = kv4;
      reinterpret_cast<float4*>(vs + j * hd)[d4] = vv4;
    }
    __syncthreads();
    float s[kQW] = {};
    const float4* krow = reinterpret_cast<const float4*>(ks + lane * (hd + 4));
    for (int d4 = 0; d4 < hd4; ++d4) {
      const float4 k4 = krow[d4];
#pragma unroll
      for (int a = 0; a < kQW; ++a) {
        const float4 q4 = reinterpret_cast<const float4*>(qs + (warp * kQW + a) * hd)[d4];
        s[a] = fmaf(q4.x, k4.x, fmaf(q4.y, k4.y, fmaf(q4.z, k4.z, fmaf(q4.w, k4.w, s[a]))));
      }
    }
    float e[kQW];
#pragma unroll
    for (int a = 0; a < kQW; ++a) {
      const int64_t t = tile0 + warp * kQW + a;
      if (kt0 + lane > pos0 + t) s[a] = -INFINITY;  // causal mask (also past kv_end)
      const float m_new = fmaxf(m[a], warp_max(s[a]));
      const float corr = exp_diff(m[a], m_new);
      e[a] = exp_diff(s[a], m_new);
      l[a] = l[a] * corr + warp_sum(e[a]);
#pragma unroll
      for (int i = 0; i < EPT; ++i) acc[a][i] *= corr;
      m[a] = m_new;
    }
    for (int j = 0; j < kFlashK; ++j) {
      float vv[EPT];
#pragma unroll
      for (int i = 0; i < EPT; ++i) {
        const int d = lane + 32 * i;
        vv[i] = d < hd ? vs[j * hd + d] : 0.f;
      }
#pragma unroll
      for (int a = 0; a < kQW; ++a) {
        const float p = __shfl_sync(0xffffffffu, e[a], j);
#pragma unroll
        for (int i = 0; i < EPT; ++i) acc[a][i] = fmaf(p, vv[i], acc[a][i]);
      }
    }
  }
#pragma unroll
  for (int a = 0; a < kQW; ++a) {
    const int64_t t = tile0 + warp * kQW + a;
    if (t >= n_tokens) continue;
    const float inv = 1.f / l[a];
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) out[(t * n_heads + h) * hd + d] = acc[a][i] * inv;
    }
  }
}

bool use_flash(int64_t n_tokens, int64_t hd) {
  return n_tokens >= kFlashMinTokens && hd % 4 == 0;
}

template <class Fn>
bool dispatch_ept(int64_t hd, Fn&& fn) {
  if (hd <= 32) return fn(std::integral_constant<int, 1>{}), true;
  if (hd <= 64) return fn(std::integral_constant<int, 2>{}), true;
  if (hd <= 96) return fn(std::integral_constant<int, 3>{}), true;
  if (hd <= 128) return fn(std::integral_constant<int, 4>{}), true;
  if (hd <= 192) return fn(std::integral_constant<int, 6>{}), true;
  if (hd <= 256) return fn(std::integral_constant<int, 8>{}), true;
  return false;
}

}  // namespace

int64_t attention_partials_floats(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                  int64_t max_ctx) {
  if (use_flash(n_tokens, head_dim)) return 0;
  const int64_t splits = (max_ctx + kChunk - 1) / kChunk;
  return n_tokens * n_heads * splits * (head_dim + 2);
}

cudaError_t launch_attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                             int64_t n_tokens, int64_t pos0, const int32_t* pos0_dev,
                             int64_t max_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                             float scale, float* partials, cudaStream_t s, void* qbuf) {
  if (n_tokens <= 0) return cudaSuccess;
  if (head_dim > 256 || head_dim <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    return cudaErrorInvalidValue;
  if (use_flash(n_tokens, head_dim) && !pos0_dev) {
    const size_t smem =
        size_t(kFlashQ * head_dim + kFlashK * (head_dim + 4) + kFlashK * head_dim) * sizeof(float);
    const dim3 grid(unsigned((n_tokens + kFlashQ - 1) / kFlashQ), unsigned(n_heads));
    cudaError_t err = cudaSuccess;
    dispatch_ept(head_dim, [&](auto ept) {
      auto* kernel = attn_flash_kernel<decltype(ept)::value>;
      if (smem > 48 * 1024)
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (err == cudaSuccess)
        kernel<<<grid, 128, smem, s>>>(q, k_cache, v_cache, out, n_tokens, pos0, int(n_heads),
                                       int(n_kv_heads), int(head_dim), scale);
    });
    return err != cudaSuccess ? err : cudaGetLastError();
  }
  if (!partials) return cudaErrorInvalidValue;
  const int64_t splits = (max_ctx + kChunk - 1) / kChunk;
  const dim3 grid(unsigned(n_tokens * n_heads), unsigned(splits > 0 ? splits : 1));
  dispatch_ept(head_dim, [&](auto ept) {
    attn_split_kernel<decltype(ept)::value>
        <<<grid, kSplitWarps * 32, 0, s>>>(q, k_cache, v_cache, partials, pos0, pos0_dev,
                                           int(n_heads), int(n_kv_heads), int(head_dim), scale);
  });
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  QuantOut qo;
  if (qbuf) {
    if (head_dim % 32 != 0) return cudaErrorInvalidValue;
    const QuantizedActs v = quantized_acts_view(qbuf, n_tokens, n_heads * head_dim);
    qo = {const_cast<int8_t*>(v.q1), const_cast<int8_t*>(v.q2),
          reinterpret_cast<float4*>(const_cast<float*>(v.scales))};
  }
  attn_combine_kernel<<<unsigned(n_tokens * n_heads), 128, 0, s>>>(partials, out, int(grid.y),
                                                                   int(head_dim), qo);
  return cudaGetLastError();
}

}  // namespace hearth::cuda
