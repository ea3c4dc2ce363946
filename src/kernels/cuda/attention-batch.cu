// A decode step of many sequences in few launches (cuda-ops.h AttnSegment): RoPE on every
// segment's q and k with the K/V append into each segment's own cache (one launch), then causal
// attention of each segment's one query over its own rows 0..pos (one launch, split-K over
// kChunk-position chunks, and one combine launch). Segments may have any lengths; the grid
// covers the longest and chunks past a segment's end exit at once. Steps the single-token
// decode kernels do faster (decode_kernels_take: f16, bf16, q8_0 at head sizes 64-256) go to
// those instead, a block per (KV head's query heads, split, segment): the chunked kernel spends
// ~45 warp instructions per query head and cached row (a warp's dot and butterfly per key) and,
// issue-bound, read a 32-sequence step's caches at 2.4 TB/s with 32 KV heads and 0.7-1 TB/s with
// Llama 3's 8.
// Cache rows hold any of the cache element types (kv-rows.cuh): f32, f16 and bf16 ones take their
// k and v in the RoPE launch, q8_0 ones from a warp-collective store launch (a 32-element block
// per warp); attention reads them in place (KvRaw).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/attention-softmax.cuh"
#include "kernels/cuda/decode-batch.h"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope-pair.cuh"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

namespace {

constexpr int kChunk = 64;  // context positions per split block
constexpr int kWarps = 4;   // warps per split block, each an online softmax over its keys
constexpr int kKeys = 4;    // positions per warp step

// EPT elements lane, lane + 32, ... of the query row.
template <int EPT>
__device__ __forceinline__ void load_row(const float* row, int lane, float (&v)[EPT]) {
#pragma unroll
  for (int i = 0; i < EPT; ++i) v[i] = __ldg(row + lane + 32 * i);
}

// EPT elements lane, lane + 32, ... of the cache row starting at element e0 (e0 % 32 == 0),
// raw (KvRaw: widened where used, so a round's loads are all in flight first).
template <KvForm F, int EPT>
__device__ __forceinline__ void load_cache_row(const uint8_t* rows, int64_t e0, int lane,
                                               KvRaw<F> (&v)[EPT]) {
#pragma unroll
  for (int i = 0; i < EPT; ++i) v[i].load(rows, e0, i, lane, DType::F32);
}

// One thread per rotated pair (q heads then k heads, every segment) and, for the plain cache
// types (F32, F16, BF16), per v element, k and v stored to row pos of each segment's cache in
// kv_store_plain's rounding; q8_0 caches get k and v from store_kv_batch_kernel (its blocks'
// scales need a warp).
__global__ void rope_kv_batch_kernel(float* q, int nq, float* k, int nk, const float* v, int hd,
                                     const AttnSegment* segs, int n_segs, const float* inv_freq,
                                     int style, DType type) {
  pdl_trigger();
  pdl_wait();
  const bool store = type != DType::Q8_0;
  const int half = hd / 2, kvd = nk * hd;
  const int64_t pairs = int64_t(n_segs) * (nq + nk) * half;
  const int64_t total = pairs + (store ? int64_t(n_segs) * kvd : 0);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < pairs) {
      const int p = int(i % half);
      const int64_t hs = i / half;
      const int h = int(hs % (nq + nk)), s = int(hs / (nq + nk));
      const AttnSegment seg = segs[s];
      const float2 cs = rope_cos_sin(seg.pos, __ldg(inv_freq + p));
      if (h < nq) {
        rope_rotate_pair(q + (int64_t(s) * nq + h) * hd, p, half, style, cs.x, cs.y);
      } else {
        const int kh = h - nq;
        float* row = k + (int64_t(s) * nk + kh) * hd;
        rope_rotate_pair(row, p, half, style, cs.x, cs.y);
        if (store) {
          const int a = style == 0 ? 2 * p : p, b = style == 0 ? 2 * p + 1 : p + half;
          const int64_t e0 = int64_t(seg.pos) * kvd + kh * hd;
          auto* cache = static_cast<uint8_t*>(seg.k_cache);
          kv_store_plain(cache, e0 + a, row[a], type);
          kv_store_plain(cache, e0 + b, row[b], type);
        }
      }
    } else {
      const int64_t e = i - pairs;
      const int s = int(e / kvd), c = int(e % kvd);
      const AttnSegment seg = segs[s];
      kv_store_plain(static_cast<uint8_t*>(seg.v_cache), int64_t(seg.pos) * kvd + c, v[e], type);
    }
  }
}

// One warp per 32 elements of a segment's k or v row: row pos of its cache, rounded and packed
// as `type` (kv_store_warp: the CPU's rounding).
__global__ void store_kv_batch_kernel(const float* k, const float* v, int kvd,
                                      const AttnSegment* segs, int n_segs, DType type) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(n_segs) * 2 * (kvd / 32);
  for (int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; w < warps;
       w += (int64_t(gridDim.x) * blockDim.x) >> 5) {
    const int block = int(w % (kvd / 32));
    const int64_t sv = w / (kvd / 32);
    const int s = int(sv / 2);
    const bool is_v = sv % 2;
    const AttnSegment seg = segs[s];
    const int64_t e = int64_t(seg.pos) * kvd + block * 32 + lane;
    const float x = (is_v ? v : k)[int64_t(s) * kvd + block * 32 + lane];
    kv_store_warp(static_cast<uint8_t*>(is_v ? seg.v_cache : seg.k_cache), e, x, type, lane);
  }
}

// grid (n_heads, chunks, segments), kWarps warps. Block (h, c, s) takes positions
// c*kChunk .. of segment s up to its pos; each warp a quarter of them with an online softmax,
// merged in shared memory into partial (acc[hd], max, sum) of the chunk.
template <KvForm F, int EPT>
__global__ void __launch_bounds__(kWarps * 32)
    attention_batch_kernel(const float* q, const AttnSegment* segs, int n_heads, int n_kv_heads,
                           float scale, int chunks, float* partials) {
  constexpr int hd = 32 * EPT;
  pdl_trigger();
  pdl_wait();
  const int h = blockIdx.x, c = blockIdx.y, s = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const AttnSegment seg = segs[s];
  const int begin = c * kChunk, end = min(begin + kChunk, seg.pos + 1);
  if (begin >= end) return;  // (the combine reads only chunks that hold positions)
  const int kvd = n_kv_heads * hd, kvh = h / (n_heads / n_kv_heads);
  float qv[EPT];
  load_row<EPT>(q + (int64_t(s) * n_heads + h) * hd, lane, qv);
  const auto* kc = static_cast<const uint8_t*>(seg.k_cache);
  const auto* vc = static_cast<const uint8_t*>(seg.v_cache);
  float m = -INFINITY, l = 0.f, acc[EPT];
#pragma unroll
  for (int i = 0; i < EPT; ++i) acc[i] = 0.f;
  // Warp w: kChunk / kWarps consecutive positions, kKeys at a time with all their K and V loads
  // in flight before the first dot (one key at a time waits a full load latency per key).
  const int wb = begin + warp * (kChunk / kWarps), we = min(wb + kChunk / kWarps, end);
  for (int p0 = wb; p0 < we; p0 += kKeys) {
    KvRaw<F> kr[kKeys][EPT], vr[kKeys][EPT];
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const int64_t p = min(p0 + j, we - 1);  // (past the end: a duplicate, masked below)
      load_cache_row<F, EPT>(kc, p * kvd + kvh * hd, lane, kr[j]);
      load_cache_row<F, EPT>(vc, p * kvd + kvh * hd, lane, vr[j]);
    }
    float sc[kKeys], mx = m;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < EPT; ++i) d += qv[i] * kr[j][i].value();
      const float dot = warp_sum(d);  // (every lane: p0 and we are the warp's)
      sc[j] = p0 + j < we ? dot * scale : -INFINITY;
      mx = fmaxf(mx, sc[j]);
    }
    // mx is finite: position p0 is in range.
    const float corr = m == -INFINITY ? 0.f : __expf(m - mx);
    l *= corr;
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc[i] *= corr;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const float w = sc[j] == -INFINITY ? 0.f : __expf(sc[j] - mx);
      l += w;
#pragma unroll
      for (int i = 0; i < EPT; ++i) acc[i] += w * vr[j][i].value();
    }
    m = mx;
  }
  // Merge the warps: each scales its state to the block's max.
  __shared__ WarpStates<kWarps, EPT> sm;
  const float bm = share_warp_states(sm, m, l, acc, warp, lane);
  float* out = partials + ((int64_t(s) * n_heads + h) * chunks + c) * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      if (sm.m[w] != -INFINITY) a += sm.acc[w][d] * __expf(sm.m[w] - bm);
    out[d] = a;
  }
  if (threadIdx.x == 0) {
    float bl = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      if (sm.m[w] != -INFINITY) bl += sm.l[w] * __expf(sm.m[w] - bm);
    out[hd] = bm;
    out[hd + 1] = bl;
  }
}

// One block per (head, segment): the chunks' partials rescaled to their common max and summed.
// xh (optional): the output's fp16 copy as launch_batch_x_half lays it out (batch_half_index),
// for the O projection's batched matmul.
__global__ void attention_batch_combine_kernel(const AttnSegment* segs, int n_heads, int hd,
                                               int chunks, const float* partials, float* out,
                                               __half* xh) {
  pdl_trigger();
  pdl_wait();
  const int h = blockIdx.x, s = blockIdx.y;
  const int used = segs[s].pos / kChunk + 1;
  const float* p = partials + (int64_t(s) * n_heads + h) * chunks * (hd + 2);
  float gm = -INFINITY;
  for (int c = 0; c < used; ++c) gm = fmaxf(gm, p[c * (hd + 2) + hd]);
  float gl = 0.f;
  for (int c = 0; c < used; ++c) gl += p[c * (hd + 2) + hd + 1] * __expf(p[c * (hd + 2) + hd] - gm);
  const int64_t row0 = (int64_t(s) * n_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
    for (int c = 0; c < used; ++c) a += p[c * (hd + 2) + d] * __expf(p[c * (hd + 2) + hd] - gm);
    out[row0 + d] = a / gl;
    if (xh) xh[batch_half_index(row0 + d)] = __float2half_rn(a / gl);
  }
}

// Whether the decode kernels take a step (else the chunked kernel). They win wherever a block
// serves several query heads (GQA: 2.5-3x at 32 sequences, Llama 3's 8 KV heads) or the rows
// are q8_0 (1.6-2x), and with few sequences (llama2-7b f16, 8 x 150: 10.8 against 14.2 us, the
// step +5%); with one query head a KV head, 16-bit rows and enough sequences to fill the GPU
// with blocks of one split, the chunked kernel's grid of 64-position chunks ran 15-20% faster
// at depth 150 (H200, hearth-cuda-bench --attention-batch-only: llama2-7b f16, 32 sequences
// 33.6 against 39.2 us, 64 57 against 73; even at 512, within 3% at 2048).
bool decode_kernels_take(int64_t n_segs, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                         DType cache_type) {
  if (!attention_decode_batch_supported(head_dim, cache_type)) return false;
  return n_heads != n_kv_heads || cache_type == DType::Q8_0 ||
         n_segs * n_heads < 2 * int64_t(device_sm_count());
}

int chunks_for(int64_t max_ctx) {
  return int((max_ctx + kChunk - 1) / kChunk);
}

}  // namespace

bool attention_batch_supported(int64_t head_dim, int64_t n_heads, int64_t n_kv_heads) {
  return (head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256) &&
         n_kv_heads > 0 && n_heads % n_kv_heads == 0;
}

int64_t attention_batch_partials_floats(int64_t n_segs, int64_t n_heads, int64_t head_dim,
                                        int64_t max_ctx) {
  // The chunked kernel's partials after the decode kernels' counters too: it must not write
  // over them (the two share the buffer, and the counters stay zero between launches).
  return std::max(attention_counter_slots(n_segs, n_heads) +
                      n_segs * n_heads * chunks_for(max_ctx) * (head_dim + 2),
                  attention_decode_batch_floats(n_segs, n_heads, head_dim, max_ctx));
}

cudaError_t launch_rope_kv_batch(float* q, int64_t nq, float* k, int64_t nk, const float* v,
                                 int64_t head_dim, const AttnSegment* segs, int64_t n_segs,
                                 DType cache_type, const float* inv_freq, int style,
                                 cudaStream_t s) {
  if (n_segs <= 0) return cudaSuccess;
  if (head_dim % 2 != 0 || !is_cuda_kv_type(cache_type)) return cudaErrorInvalidValue;
  const bool plain = cache_type != DType::Q8_0;
  const int64_t kvd = nk * head_dim;
  if (!plain && kvd % 32 != 0) return cudaErrorInvalidValue;
  const int64_t total = n_segs * ((nq + nk) * (head_dim / 2) + (plain ? kvd : 0));
  const unsigned grid = unsigned(std::min<int64_t>((total + 255) / 256, 65535));
  cudaError_t e =
      launch_pdl(rope_kv_batch_kernel, dim3(grid), dim3(256), 0, s, q, int(nq), k, int(nk), v,
                 int(head_dim), segs, int(n_segs), inv_freq, style, cache_type);
  if (e != cudaSuccess || plain) return e;
  const int64_t threads = n_segs * 2 * kvd;  // a lane per element
  return launch_pdl(store_kv_batch_kernel,
                    dim3(unsigned(std::min<int64_t>((threads + 255) / 256, 65535))), dim3(256), 0,
                    s, static_cast<const float*>(k), v, int(kvd), segs, int(n_segs), cache_type);
}

cudaError_t launch_attention_batch(const float* q, float* out, const AttnSegment* segs,
                                   int64_t n_segs, int64_t max_ctx, int64_t n_heads,
                                   int64_t n_kv_heads, int64_t head_dim, DType cache_type,
                                   float scale, float* partials, cudaStream_t s, void* xh,
                                   BatchAttnKernel kernel) {
  if (n_segs <= 0) return cudaSuccess;
  const bool decode =
      kernel == BatchAttnKernel::kDecode
          ? attention_decode_batch_supported(head_dim, cache_type)
          : kernel == BatchAttnKernel::kChosen &&
                decode_kernels_take(n_segs, n_heads, n_kv_heads, head_dim, cache_type);
  if (decode)
    return launch_attention_decode_batch(q, segs, n_segs, out, xh, max_ctx, n_heads, n_kv_heads,
                                         head_dim, cache_type, scale, partials, s);
  if (!attention_batch_supported(head_dim, n_heads, n_kv_heads) || max_ctx <= 0 || n_segs > 65535 ||
      !is_cuda_kv_type(cache_type))
    return cudaErrorInvalidValue;
  const int chunks = chunks_for(max_ctx);
  partials += attention_counter_slots(n_segs, n_heads);
  const dim3 grid{unsigned(n_heads), unsigned(chunks), unsigned(n_segs)}, block{kWarps * 32};
  cudaError_t e = cudaErrorInvalidValue;
  dispatch_kv_form(cache_type, cache_type, [&](auto form) {
    constexpr KvForm F = decltype(form)::value;
    if constexpr (F != KvForm::kMixed) {
      const auto run = [&](auto kernel) {
        e = launch_pdl(kernel, grid, block, 0, s, q, segs, int(n_heads), int(n_kv_heads), scale,
                       chunks, partials);
      };
      switch (head_dim) {
        case 32:
          return run(attention_batch_kernel<F, 1>);
        case 64:
          return run(attention_batch_kernel<F, 2>);
        case 128:
          return run(attention_batch_kernel<F, 4>);
        default:
          return run(attention_batch_kernel<F, 8>);
      }
    }
  });
  if (e != cudaSuccess) return e;
  return launch_pdl(attention_batch_combine_kernel, dim3(unsigned(n_heads), unsigned(n_segs)),
                    dim3(128), 0, s, segs, int(n_heads), int(head_dim), chunks,
                    static_cast<const float*>(partials), out, static_cast<__half*>(xh));
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
