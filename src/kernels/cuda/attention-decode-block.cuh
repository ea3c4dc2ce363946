// The pieces both single-token decode attention kernels share (attention-decode.cu's scalar one,
// attention-decode-mma.cu's tensor-core one): the fused rope's element rotation, Qwen3's per-head
// norms, a step of many sequences' segment (take_segment), and a block's end: its warps'
// online-softmax states merged, then the block's output or its split's partial, and in the last
// block of a row the splits combined (attention.cu's split kernel's layout of partials and
// counters).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/attention-softmax.cuh"
#include "kernels/cuda/cp-async.cuh"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rms-scale.cuh"
#include "kernels/cuda/rope-pair.cuh"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

// Rotated element d of a head row x (shared memory), as rope_rows_tab / launch_rope_kv.
__device__ __forceinline__ float rope_elem(const float* x, const float2* cs, int style, int hd,
                                           int d) {
  int j, o;
  bool first;
  if (style == 0) {
    j = d >> 1, first = (d & 1) == 0, o = first ? d + 1 : d - 1;
  } else {
    first = d < hd / 2, j = first ? d : d - hd / 2, o = first ? d + hd / 2 : d - hd / 2;
  }
  const float2 t = cs[j];
  return first ? x[d] * t.x - x[o] * t.y : x[o] * t.y + x[d] * t.x;
}

// Qwen3's per-head RMSNorms (rope.q_norm / k_norm) of the G query heads in sm_q and this
// token's k in sm_kraw, in place, before the rotation: warp_rms_scale over the rows (the same
// 16-byte words and sums as the separate launch, read from shared memory: both arrays 16-byte
// aligned), then (x * scale) * weight: rmsnorm_heads' bits, and the split kernel's.
template <int G, int hd, int kWarps>
__device__ __forceinline__ void norm_heads_in_smem(const AttnRope& rope, float (&sm_q)[G][hd],
                                                   float* sm_kraw, int warp, int lane) {
  for (int g = warp; g <= G; g += kWarps) {  // g == G: the k row
    float* row = g < G ? sm_q[g] : sm_kraw;
    const float* w = g < G ? rope.q_norm : rope.k_norm;
    const float sc = warp_rms_scale(row, hd, rope.norm_eps, lane);  // every lane read the row
    for (int d = lane; d < hd; d += 32) row[d] = row[d] * sc * __ldg(w + d);
  }
}

// Where a decode block sits and which tiles of kT rows it takes: blockIdx.x is the row (KV head
// x group of G query heads), blockIdx.y the split (blockIdx.z the segment: take_segment); tiles are
// dealt round-robin (split s: s, s + n_splits, ...) or, with runs, in contiguous runs. live() is
// false for a split past the tiles (it returns at once). The query at pcur (read on the device:
// one graph per step) sees the n_ctx positions first .. pcur (first > 0 under a sliding window);
// tiles count from first, and row() finds a visible position's cache row (a ring's wraps).
struct DecodeTiles {
  int kvh, h0, brow, per_kv, split, n_splits, n_live, n_mine;
  int64_t pcur, n_ctx, n_tiles, run0;
  int64_t first;    // the first position the query sees
  int ring, ring0;  // a ring cache's rows and the row of `first` (ring 0: rows are positions)
  bool runs;
  __device__ bool live() const { return split < n_live; }
  __device__ int64_t pos(int k, int kT) const {  // first visible index of this split's tile k
    return (runs ? run0 + k : int64_t(split) + int64_t(k) * n_splits) * kT;
  }
  // Cache row of visible index i (position first + i), 0 <= i < n_ctx <= ring.
  __device__ int64_t row(int64_t i) const {
    if (ring == 0) return first + i;
    const int r = ring0 + int(i);
    return r >= ring ? r - ring : r;
  }
  __device__ int64_t cur_row() const { return row(n_ctx - 1); }  // pcur's
  // Rows a tile starting at visible index p0 takes before its ring wraps (its later rows sit
  // `ring` lower than row(p0) + r): the copy loops offset each row with one compare.
  __device__ int wrap_at(int64_t p0) const { return ring > 0 ? ring - int(row(p0)) : 0x7fffffff; }
  // Whether this split holds the last tile (the one with row pcur).
  __device__ bool owns_last() const {
    return split == (runs ? n_live - 1 : int((n_tiles - 1) % n_splits));
  }
  // Whether this block appends row pcur (fused rope): it owns the last tile, and it is the
  // first head group of its KV head.
  __device__ bool appends() const { return brow % per_kv == 0 && owns_last(); }
};
template <int G>
__device__ __forceinline__ DecodeTiles decode_tiles(int kT, int n_heads, int n_kv_heads,
                                                    int64_t pos0_host, const int32_t* pos0_dev,
                                                    bool runs, const AttnKv& kv) {
  DecodeTiles b;
  const int group = n_heads / n_kv_heads;
  b.brow = blockIdx.x;
  b.per_kv = group / G;
  b.kvh = b.brow / b.per_kv;
  b.h0 = b.kvh * group + (b.brow % b.per_kv) * G;
  b.split = blockIdx.y, b.n_splits = gridDim.y;
  b.pcur = pos0_dev ? int64_t(*pos0_dev) : pos0_host;
  b.first = kv.window > 0 && b.pcur >= kv.window ? b.pcur + 1 - kv.window : 0;
  b.ring = kv.ring_rows;
  b.ring0 = b.ring > 0 ? int(b.first) % b.ring : 0;  // (positions are ints: pos0_dev's type)
  b.n_ctx = b.pcur + 1 - b.first;
  b.n_tiles = (b.n_ctx + kT - 1) / kT;
  b.n_live = b.n_tiles < b.n_splits ? int(b.n_tiles) : b.n_splits;
  b.runs = runs;
  const int64_t n_live = b.n_live > 0 ? b.n_live : 1;
  const int64_t run_len = b.n_tiles / n_live, run_extra = b.n_tiles % n_live;
  b.run0 = b.split * run_len + (b.split < run_extra ? b.split : run_extra);
  b.n_mine = runs ? int(run_len + (b.split < run_extra))
                  : int((b.n_tiles - b.split + b.n_splits - 1) / b.n_splits);
  return b;
}

// A step of many sequences (DecodeSegments): the kernel's pointers moved to block z's segment,
// after the PDL wait (this step's kernels wrote q, the descriptors and the rows before), and
// with the rope fused (rope.k set) its k and v rows to the segment's ([n_segs, n_kv_heads, hd]).
// Returns the flat index of the segment's first output (0 for one sequence).
__device__ __forceinline__ int64_t take_segment(
    const DecodeSegments& sg, int n_heads, int n_kv_heads, int hd, const float* __restrict__& q,
    uint8_t*& kc, uint8_t*& vc, const int32_t*& pos0_dev, float* __restrict__& out,
    float* __restrict__& partials, unsigned* __restrict__& counters, AttnRope& rope) {
  if (!sg.segs) return 0;
  const AttnSegment* seg = sg.segs + blockIdx.z;
  kc = static_cast<uint8_t*>(seg->k_cache);
  vc = static_cast<uint8_t*>(seg->v_cache);
  pos0_dev = &seg->pos;
  const int64_t row0 = int64_t(blockIdx.z) * n_heads * hd;
  if (rope.k) {
    const int64_t kv0 = int64_t(blockIdx.z) * n_kv_heads * hd;
    rope.k += kv0;
    rope.v += kv0;
  }
  q += row0;
  out += row0;
  partials += int64_t(blockIdx.z) * n_heads * gridDim.y * (hd + 2);
  counters += int64_t(blockIdx.z) * gridDim.x;
  return row0;
}

// The ring's first kStages - 1 tiles asked for, one commit group each (empty ones past n_mine,
// so every later wait counts groups alike).
template <int kStages, class Issue>
__device__ __forceinline__ void issue_first_tiles(int n_mine, Issue&& issue) {
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < n_mine) issue(k);
    cp_async_commit();
  }
}

// With the rope fused, the rotation's angles (they need only the position and the constant
// frequencies, so they are made before the wait), then the wait for the kernel before (PDL).
// cos and sin times rope.mscale, as launch_rope_partial's (x 1 is exact).
template <int hd>
__device__ __forceinline__ void rope_angles_then_wait(const AttnRope& rope, int64_t pcur,
                                                      float2* sm_cs) {
  for (int j = threadIdx.x; j < hd / 2; j += blockDim.x) {
    const float2 cs = rope_cos_sin(pcur, rope.inv_freq[j]);
    sm_cs[j] = make_float2(cs.x * rope.mscale, cs.y * rope.mscale);
  }
  pdl_wait();
}

// AttnKv::softcap's transform of a scaled score, cap * tanh(s / cap), with two_over_cap = 2 / cap
// made once by the caller: tanh(x) = 1 - 2 / (e^2x + 1) is one exponential and one fast
// division, ~1e-7 from tanh (the scores' own rounding), where tanhf's ~25 instructions in each
// unrolled copy (a block's rows x heads of them) grew the decode kernels by up to a quarter.
__device__ __forceinline__ float capped_score(float s, float cap, float two_over_cap) {
  return cap * (1.f - __fdividef(2.f, __expf(s * two_over_cap) + 1.f));
}

// The block's G query heads (raw) into sm_q and, with the rope fused, this token's k and v into
// sm_kraw / sm_vcur, then Qwen3's norms when set; ends synchronised.
template <int G, int hd, int kWarps>
__device__ __forceinline__ void load_q_kv(const float* q, const AttnRope& rope, int h0, int kvh,
                                          float (&sm_q)[G][hd], float* sm_kraw, float* sm_vcur) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) (&sm_q[0][0])[i] = q[int64_t(h0) * hd + i];
  if (rope.k)
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      sm_kraw[d] = rope.k[int64_t(kvh) * hd + d];
      sm_vcur[d] = rope.v[int64_t(kvh) * hd + d];
    }
  __syncthreads();
  if (rope.k && rope.q_norm) {
    norm_heads_in_smem<G, hd, kWarps>(rope, sm_q, sm_kraw, warp, lane);
    __syncthreads();
  }
}

// With the rope fused: this token's k rotated; the block that owns row pcur's tile, for the
// first head group of the KV head (store), appends k and v at cache row `row` (warp-collective,
// whole 32-dim blocks); sm_kcur / sm_vcur get k and v as the cache holds them (the
// store-then-attend result), which every block attends to for row pcur instead of its staged
// copy. The caller synchronises before reading them. F: the cache's form (the decode kernels' K
// and V share one), so only its store and rounding are compiled in.
template <int hd, KvForm F>
__device__ __forceinline__ void rotate_append_kv(const AttnRope& rope, const float* sm_kraw,
                                                 const float2* sm_cs, float* sm_kcur,
                                                 float* sm_vcur, bool store, uint8_t* kc,
                                                 uint8_t* vc, int64_t row, int n_kv_heads,
                                                 int kvh) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int d0 = warp * 32; d0 < hd; d0 += blockDim.x) {
    const int d = d0 + lane;
    const float kr = rope_elem(sm_kraw, sm_cs, rope.style, hd, d);
    const float vr = sm_vcur[d];
    constexpr DType t = kv_form_dtype<F>();
    if (store) {
      const int64_t e = row * n_kv_heads * hd + int64_t(kvh) * hd + d;
      kv_store_warp(kc, e, kr, t, lane);
      kv_store_warp(vc, e, vr, t, lane);
    }
    sm_kcur[d] = kv_round_warp(kr, t);
    sm_vcur[d] = kv_round_warp(vr, t);
  }
}

// A block's end, every thread calling it once its warps' states are in shared memory (after a
// __syncthreads): sm_m, sm_l [kWarps][G] (running max, sum), sm_acc [kWarps][G][hd] (unscaled
// output, natural dim order). One live split: the block writes the output (and its int8 copy,
// or its fp16 one at xh, output flat index out0 on); else its partial, and the row's last block
// to finish combines them.
template <int kWarps, int G, int hd>
__device__ __forceinline__ void finish_decode_block(
    const float* sm_m, const float* sm_l, const float* sm_acc, const DecodeTiles& at,
    float* __restrict__ partials, unsigned* __restrict__ counters, float* __restrict__ out,
    DecodeQuantOut qo, const float* sinks, void* xh = nullptr, int64_t out0 = 0) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h0 = at.h0, brow = at.brow, split = at.split, n_live = at.n_live;
  const int n_splits = at.n_splits;
  // Each warp's 32-output chunks of the block's G x hd, warp + o kWarps for o < kOut.
  constexpr int kChunks = G * hd / 32, kOut = (kChunks + kWarps - 1) / kWarps;
  const int n_out = kChunks > warp ? (kChunks - warp + kWarps - 1) / kWarps : 0;
  // Its values written, and their int8 copy (one batched quantization: warp-uniform n_out).
  auto emit_all = [&](const float(&v)[kOut]) {
    int64_t blk[kOut];
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      const int c = warp + o * kWarps;
      blk[o] = (int64_t(h0) * hd) / 32 + c;
      if (o < n_out) {
        const int64_t i = int64_t(h0) * hd + c * 32 + lane;
        out[i] = v[o];
        if (xh) static_cast<__half*>(xh)[batch_half_index(out0 + i)] = __float2half_rn(v[o]);
      }
    }
    if (qo.q1) quant_blocks32<kOut>(v, lane, blk, n_out, qo.q1, qo.q2, qo.scales);
  };
  __shared__ float s_big[G], s_lt[G], s_f[kWarps][G];
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float big = -INFINITY, lt = 0.f;
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, sm_m[w * G + g]);
    for (int w = 0; w < kWarps; ++w) {
      s_f[w][g] = exp_diff(sm_m[w * G + g], big);  // warp w's states to the block's max
      lt += sm_l[w * G + g] * s_f[w][g];
    }
    s_big[threadIdx.x] = big, s_lt[threadIdx.x] = lt;
  }
  __syncthreads();
  auto merged = [&](int g, int d) {
    float a = 0.f;
    for (int w = 0; w < kWarps; ++w) a += sm_acc[(w * G + g) * hd + d] * s_f[w][g];
    return a;
  };
  // One emit_all for both ends (its int8 quantization is unrolled code a block runs once).
  float v[kOut];
  if (n_live == 1) {
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      const int i = (o < n_out ? warp + o * kWarps : 0) * 32 + lane;
      const int g = i / hd;
      v[o] = merged(g, i % hd) * softmax_out_factor(s_big[g], s_lt[g], sinks, h0 + g);
    }
  } else {
    constexpr int stride = hd + 2;
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
      const int g = i / hd, d = i % hd;
      partials[((int64_t(h0) + g) * n_splits + split) * stride + 2 + d] = merged(g, d);
    }
    if (threadIdx.x < G) {
      float* mine = partials + ((int64_t(h0) + threadIdx.x) * n_splits + split) * stride;
      mine[0] = s_big[threadIdx.x];
      mine[1] = s_lt[threadIdx.x];
    }

    if (!last_split_to_arrive(counters + brow, n_live)) return;
    __shared__ float sw[G][kDecodeMaxSplits];
    __shared__ float s_inv[G];
    for (int g = warp; g < G; g += kWarps) {
      const float2 ml = split_weights<kDecodeMaxSplits>(
          partials + (int64_t(h0) + g) * n_splits * stride, n_live, stride, sw[g], lane);
      const float mx = ml.x, lt = ml.y;
      if (lane == 0) s_inv[g] = softmax_out_factor(mx, lt, sinks, h0 + g);
    }
    if (threadIdx.x == 0) counters[brow] = 0u;
    __syncthreads();
    // Each warp's 32-output chunks summed together, split by split, so a thread has kOut x kU
    // loads from L2 in flight (one chunk at a time took ~n_live / 4 round trips per chunk: 16 us
    // for Qwen3-30B's 8 heads x 64 splits in four warps). This combine runs after every other
    // block of the row, on one block a row; 8 splits at a time where kOut >= 4 (32-64 loads in
    // flight) took it from ~7.4 to ~5.4 us for Llama 3's q8_0 form at d8192 (H200, session 67).
    constexpr int kU = kOut >= 4 ? 8 : 4;
    const float* rp[kOut];
    int gi[kOut];
    float a[kOut][kU];
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      const int c = warp + o * kWarps, i = (c < kChunks ? c : 0) * 32 + lane;
      gi[o] = i / hd;
      rp[o] = partials + (int64_t(h0) + gi[o]) * n_splits * stride + 2 + i % hd;
#pragma unroll
      for (int u = 0; u < kU; ++u) a[o][u] = 0.f;
    }
    int sp = 0;
    for (; sp + kU <= n_live; sp += kU)
#pragma unroll
      for (int o = 0; o < kOut; ++o)
#pragma unroll
        for (int u = 0; u < kU; ++u)
          a[o][u] = fmaf(__ldcg(rp[o] + (sp + u) * stride), sw[gi[o]][sp + u], a[o][u]);
    for (; sp < n_live; ++sp)
#pragma unroll
      for (int o = 0; o < kOut; ++o)
        a[o][0] = fmaf(__ldcg(rp[o] + sp * stride), sw[gi[o]][sp], a[o][0]);
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < kU; ++u) sum += a[o][u];
      v[o] = sum * s_inv[gi[o]];
    }
  }
  emit_all(v);
}

// Launches one instance of a decode kernel (both share the arguments): the first time, its opt-in
// above 48 KB of dynamic shared memory and its blocks an SM (per_sm, the caller's static for
// the instance; 2 when the query fails); the grid is the rows (brows) x one wave of splits (for
// the rows of every segment), or the probe's splits, x the segments.
template <class Kernel>
cudaError_t launch_decode_instance(Kernel kernel, int& per_sm, size_t smem, int threads,
                                   int64_t brows, int64_t max_ctx, DecodeProbe probe,
                                   cudaStream_t s, const float* q, uint8_t* kc, uint8_t* vc,
                                   const AttnRope& rope, float* partials, unsigned* counters,
                                   float* out, DecodeQuantOut qo, int64_t pos0,
                                   const int32_t* pos0_dev, int64_t n_heads, int64_t n_kv_heads,
                                   float scale, const AttnKv& kv, int64_t n_segs,
                                   const DecodeSegments& segs) {
  if (per_sm == 0) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (err != cudaSuccess) return err;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) !=
            cudaSuccess ||
        per_sm < 1)
      per_sm = 2;
  }
  // The last block of a row combines splits x g partial rows (g query heads a block, at most
  // 8), so a row's splits are capped at 256 / g (32 to 64) over caches of kWideCombineRows or
  // more, and at 32 below, where more than 32 has not been measured to win. Eight heads
  // a block (Qwen3-MoE, gpt-oss) at 64 splits made the combine the larger cost (H200, --attn-shape
  // 2 f16, us at 64 / 32: d8192 27.7 / 21.8; session 43); Llama 3's q8_0 blocks of four heads,
  // which fit four an SM, left half the SM slots empty at 32 (H100, --attn-shape 1 q8_0, us at
  // 32 / 64: d8192 24.4 / 21.9, d32768 61.8 / 42.8; session 66); over 4,096 rows Llama 3's f16
  // took 16.1 us at 64 against 14.6 at 32 (session 43). The tables: docs/history/cuda.md.
  constexpr int64_t kWideCombineRows = 8192;
  const int64_t g = brows > 0 && n_heads >= brows ? n_heads / brows : 1;
  const int64_t combine_cap =
      max_ctx >= kWideCombineRows ? std::clamp<int64_t>(256 / g, 32, kDecodeMaxSplits) : 32;
  const int64_t splits =
      probe.splits > 0 ? (probe.splits < kDecodeMaxSplits ? probe.splits : kDecodeMaxSplits)
                       : std::min(decode_splits(brows * n_segs, per_sm, max_ctx), combine_cap);
  return launch_pdl(kernel, dim3(unsigned(brows), unsigned(splits), unsigned(n_segs)),
                    dim3(threads), smem, s, q, kc, vc, rope, partials, counters, out, qo, pos0,
                    pos0_dev, int(n_heads), int(n_kv_heads), scale, kv, probe.runs, segs);
}

}  // namespace hearth::cuda
