// A decode step of many sequences in few launches (cuda-ops.h AttnSegment): after RoPE and the K/V
// append (rope-batch.cu, one launch), causal attention of each segment's one query over its own
// rows 0..pos (one launch, split-K over chunks of positions, and one combine launch unless one
// chunk held them all). Segments may have any lengths; the grid covers the longest and chunks past
// a segment's end exit at once. Steps the single-token decode kernels do faster
// (decode_kernels_take: GQA, q8_0 rows, few sequences over short contexts) go to those instead, a
// block per (KV head's query heads, split, segment). The chunked kernel takes a chunk a warp where
// a warp's 16-byte loads cover a row (f32 up to head size 128, f16 and bf16), else a 64-position
// chunk a block (a warp's dot and butterfly per key, ~45 warp instructions per query head and
// cached row, issue-bound at 2.0-2.4 TB/s). Steps of many sequences over one query head a KV head
// take that warp form as merged blocks instead (merged_takes): a block a segment's head, its warps
// splitting the positions and merging in shared memory, so no partials and no combine launch.
// Given the step's rotation (launch_attention_batch's rope), the merged blocks and the decode
// kernels also rotate q and k and append k and v themselves, so such a step's attention is one
// launch. What bounds the merged blocks (H100, ncu, llama2-7b f16, 64 sequences at depth 150):
// 126 registers a thread, so four blocks (16 warps) an SM, DRAM 76% busy. Tried and no faster
// (sessions 61-62, history/cuda.md): the first round's loads issued before the rotation, rounds
// double-buffered (168-228 registers), register caps of 80-128 (spills), and five blocks an SM
// without spills (96 registers: +3%).
// Cache rows hold any of the cache element types (kv-rows.cuh); attention reads them in place
// (KvRaw).
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

// The chunked form a warp a chunk, for f32, f16 and bf16 rows whose head fits a warp's 16-byte
// loads (head_dim x element size <= 512 bytes): the block form above spends ~45 warp
// instructions a cached row (a lane's 2-byte loads, a warp-wide dot and butterfly per key) and
// was issue-bound at 2.0-2.4 TB/s in a 32-sequence step. Here kLanesPerKey lanes share a row,
// 16 bytes each, so one load instruction covers 32 / kLanesPerKey rows, a dot is a lane's 4-8
// products and a log2(kLanesPerKey)-step butterfly, and a round's K and V loads (kLoads
// instructions each) are all in flight before its first dot.
template <KvForm F, int HD>
struct RowLanes {
  static constexpr int kElemBytes = F == KvForm::kF32 ? 4 : 2;
  static constexpr int kPerLane = 16 / kElemBytes;        // elements of one 16-byte load
  static constexpr int kLanesPerKey = HD / kPerLane;      // lanes that share a row
  static constexpr int kKeysPerLoad = 32 / kLanesPerKey;  // rows one load instruction covers
  // Load instructions a round, K and V each: 16 rows where a round of 8 covers more (a short
  // round keeps a chunk's last one from reading far past its end).
  static constexpr int kLoads = kKeysPerLoad >= 8 ? 2 : kKeysPerLoad >= 4 ? 4 : 8;
  static constexpr int kKeysPerRound = kKeysPerLoad * kLoads;
};

// 16 bytes of a cached row. As volatile asm, held live together below, so a round's loads all
// issue before its first dot: plain loads were sunk towards their uses (V's after K's dots),
// and the kernel read 15% slower at depth 512+ (H200, 32 x 512: 86.6 against 74.6 us).
__device__ __forceinline__ uint4 load_row16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A 16-byte load of row elements as f32.
template <KvForm F, int E>
__device__ __forceinline__ void widen16(const uint4& raw, float (&out)[E]) {
  if constexpr (F == KvForm::kF32) {
    out[0] = __uint_as_float(raw.x), out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z), out[3] = __uint_as_float(raw.w);
  } else {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (F == KvForm::kF16) {
        const float2 f = __half22float2(h2_bits(w[i]));
        out[2 * i] = f.x, out[2 * i + 1] = f.y;
      } else {  // bf16: the high 16 bits of an f32
        out[2 * i] = __uint_as_float(w[i] << 16),
                out[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      }
    }
  }
}

// grid (ceil(n_heads / kWarps), chunks, segments), kWarps warps: warp w of block (x, c, s) takes
// query head x * kWarps + w over positions c*chunk .. of segment s up to its pos, and writes the
// partial (acc[hd], max, sum) the block form writes, or with one chunk (chunks == 1, every
// position in it) the output itself, and its fp16 form to xh if given (no combine launch).
// kMerged: grid (n_heads, 1, segments) instead, every warp of block (h, 0, s) on query head h,
// warp w taking rounds w, w + kWarps, ... of the segment's positions; the warps' states merge in
// shared memory into the output (no partials, no combine launch).
// kRope (merged only, one query head a KV head): q, k not yet rotated and k, v not yet in the
// caches (launch_attention_batch's rope); the block rotates its head's q and k, appends k and
// v to row pos as launch_rope_kv_batch would, and attends to that row from shared memory (the
// rows read from the cache stop before it: the non-coherent loads must not see this launch's
// stores).
template <KvForm F, int HD, bool kMerged, bool kRope = false>
__global__ void __launch_bounds__(kWarps * 32)
    attention_batch_warp_kernel(const float* q, const AttnSegment* segs, int n_heads,
                                int n_kv_heads, float scale, int chunk, int chunks, float* partials,
                                float* out_rows, __half* xh, AttnRope rope) {
  static_assert(!kRope || kMerged, "the append is the merged form's");
  using L = RowLanes<F, HD>;
  constexpr int E = L::kPerLane;
  pdl_trigger();
  pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = kMerged ? int(blockIdx.x) : int(blockIdx.x) * kWarps + warp, c = blockIdx.y,
            s = blockIdx.z;
  if (!kMerged && h >= n_heads) return;
  const AttnSegment seg = segs[s];
  const int begin = kMerged ? 0 : c * chunk,
            end = kMerged ? seg.pos + (kRope ? 0 : 1) : min(begin + chunk, seg.pos + 1);
  // (the combine reads only chunks that hold positions; with the append, row pos always counts)
  if (!kRope && begin >= end) return;
  // A warp's rounds: every one of its chunk, or (kMerged) every kWarps-th of the segment's.
  const int first = begin + (kMerged ? warp * L::kKeysPerRound : 0);
  const int stride = kMerged ? kWarps * L::kKeysPerRound : L::kKeysPerRound;
  const int part = lane % L::kLanesPerKey, sub = lane / L::kLanesPerKey;
  const int kvh = h / (n_heads / n_kv_heads);
  const int64_t row_bytes = int64_t(n_kv_heads) * HD * L::kElemBytes;
  const int64_t col = (int64_t(kvh) * HD + part * E) * L::kElemBytes;
  const uint8_t* kc = static_cast<const uint8_t*>(seg.k_cache) + col;
  const uint8_t* vc = static_cast<const uint8_t*>(seg.v_cache) + col;
  // kRope: this head's q rotated, and k and v as the cache now holds them (row pos).
  __shared__ __align__(16) float sm_q[kRope ? HD : 4], sm_k[kRope ? HD : 1], sm_v[kRope ? HD : 1];
  if constexpr (kRope) {
    constexpr DType kType = kv_form_dtype<F>();
    const int64_t kvd = int64_t(n_kv_heads) * HD;
    const float* qr = q + (int64_t(s) * n_heads + h) * HD;
    const float* kr = rope.k + int64_t(s) * kvd + int64_t(kvh) * HD;
    const float* vr = rope.v + int64_t(s) * kvd + int64_t(kvh) * HD;
    const int64_t e0 = int64_t(seg.pos) * kvd + int64_t(kvh) * HD;
    auto* kcache = static_cast<uint8_t*>(seg.k_cache);
    auto* vcache = static_cast<uint8_t*>(seg.v_cache);
    // A thread a pair: rotated in place as launch_rope_kv_batch does (rope_rotate_pair), k
    // stored, then kept as stored.
    for (int p = threadIdx.x; p < HD / 2; p += blockDim.x) {
      const float2 cs = rope_cos_sin(seg.pos, __ldg(rope.inv_freq + p));
      const float cn = cs.x * rope.mscale, sn = cs.y * rope.mscale;  // (x 1 is exact)
      const int a = rope.style == 0 ? 2 * p : p, b = rope.style == 0 ? 2 * p + 1 : p + HD / 2;
      sm_q[a] = qr[a], sm_q[b] = qr[b], sm_k[a] = kr[a], sm_k[b] = kr[b];
      rope_rotate_pair(sm_q, p, HD / 2, rope.style, cn, sn);
      rope_rotate_pair(sm_k, p, HD / 2, rope.style, cn, sn);
      for (const int d : {a, b}) {
        kv_store_plain(kcache, e0 + d, sm_k[d], kType);
        sm_k[d] = kv_round_plain(sm_k[d], kType);
      }
    }
    for (int d = threadIdx.x; d < HD; d += blockDim.x) {
      kv_store_plain(vcache, e0 + d, vr[d], kType);
      sm_v[d] = kv_round_plain(vr[d], kType);
    }
    __syncthreads();
  }
  float qv[E];
  {
    const float* qr = kRope ? sm_q + part * E : q + (int64_t(s) * n_heads + h) * HD + part * E;
#pragma unroll
    for (int i = 0; i < E; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(qr + i);
      qv[i] = v.x * scale, qv[i + 1] = v.y * scale, qv[i + 2] = v.z * scale,
      qv[i + 3] = v.w * scale;
    }
  }
  // Each group of kLanesPerKey lanes keeps its own running max and sum over the rows it read;
  // the groups merge at the end.
  float m = -INFINITY, l = 0.f, acc[E];
#pragma unroll
  for (int i = 0; i < E; ++i) acc[i] = 0.f;
  for (int p0 = first; p0 < end; p0 += stride) {
    uint4 kr[L::kLoads], vr[L::kLoads];
#pragma unroll
    for (int u = 0; u < L::kLoads; ++u) {
      const int64_t p = min(p0 + u * L::kKeysPerLoad + sub, end - 1);  // (past the end: masked)
      kr[u] = load_row16(kc + p * row_bytes);
      vr[u] = load_row16(vc + p * row_bytes);
    }
    // (every load of the round live here: none is sunk past another's use)
#pragma unroll
    for (int u = 0; u < L::kLoads; ++u)
      asm volatile("" ::"r"(kr[u].x), "r"(kr[u].y), "r"(kr[u].z), "r"(kr[u].w), "r"(vr[u].x),
                   "r"(vr[u].y), "r"(vr[u].z), "r"(vr[u].w));
    float sc[L::kLoads], mx = m;
#pragma unroll
    for (int u = 0; u < L::kLoads; ++u) {
      float kv[E];
      widen16<F, E>(kr[u], kv);
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < E; ++i) d = fmaf(qv[i], kv[i], d);
#pragma unroll
      for (int off = L::kLanesPerKey / 2; off > 0; off >>= 1)
        d += __shfl_xor_sync(0xffffffffu, d, off);
      sc[u] = p0 + u * L::kKeysPerLoad + sub < end ? d : -INFINITY;
      mx = fmaxf(mx, sc[u]);
    }
    // (mx is -inf only for a group none of whose rows so far were in range)
    const float corr = m == -INFINITY ? 0.f : __expf(m - mx);
    l *= corr;
#pragma unroll
    for (int i = 0; i < E; ++i) acc[i] *= corr;
#pragma unroll
    for (int u = 0; u < L::kLoads; ++u) {
      const float w = sc[u] == -INFINITY ? 0.f : __expf(sc[u] - mx);
      float vv[E];
      widen16<F, E>(vr[u], vv);
      l += w;
#pragma unroll
      for (int i = 0; i < E; ++i) acc[i] = fmaf(w, vv[i], acc[i]);
    }
    m = mx;
  }
  if constexpr (kRope) {
    // Row pos, attended once: by warp 0's first group of lanes.
    if (warp == 0) {
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < E; ++i) d = fmaf(qv[i], sm_k[part * E + i], d);
#pragma unroll
      for (int off = L::kLanesPerKey / 2; off > 0; off >>= 1)
        d += __shfl_xor_sync(0xffffffffu, d, off);
      if (sub == 0) {
        const float mx = fmaxf(m, d);
        const float corr = m == -INFINITY ? 0.f : __expf(m - mx), w = __expf(d - mx);
        l = l * corr + w;
#pragma unroll
        for (int i = 0; i < E; ++i) acc[i] = fmaf(w, sm_v[part * E + i], acc[i] * corr);
        m = mx;
      }
    }
  }
  // The groups' states merged across the warp (the chunk's first row is in range, so the merged
  // max is finite; with the append, warp 0's first group holds row pos).
#pragma unroll
  for (int off = L::kLanesPerKey; off < 32; off <<= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, off);
    const float lo = __shfl_xor_sync(0xffffffffu, l, off);
    const float mn = fmaxf(m, mo);
    const float c1 = m == -INFINITY ? 0.f : __expf(m - mn);
    const float c2 = mo == -INFINITY ? 0.f : __expf(mo - mn);
    l = l * c1 + lo * c2;
#pragma unroll
    for (int i = 0; i < E; ++i)
      acc[i] = acc[i] * c1 + __shfl_xor_sync(0xffffffffu, acc[i], off) * c2;
    m = mn;
  }
  if constexpr (kMerged) {
    // (a warp with no rounds holds m = -inf, l = 0 and adds nothing)
    __shared__ float wm[kWarps], wl[kWarps], wacc[kWarps][HD];
    if (sub == 0)
#pragma unroll
      for (int i = 0; i < E; ++i) wacc[warp][part * E + i] = acc[i];
    if (lane == 0) wm[warp] = m, wl[warp] = l;
    __syncthreads();
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) top = fmaxf(top, wm[w]);
    float wt[kWarps], sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      wt[w] = wm[w] == -INFINITY ? 0.f : __expf(wm[w] - top);
      sum += wl[w] * wt[w];
    }
    const int64_t row0 = (int64_t(s) * n_heads + h) * HD;
    for (int d = threadIdx.x; d < HD; d += kWarps * 32) {
      float a = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) a += wacc[w][d] * wt[w];
      out_rows[row0 + d] = a / sum;
      if (xh) xh[batch_half_index(row0 + d)] = __float2half_rn(a / sum);
    }
    return;
  }
  if (chunks == 1) {
    if (sub != 0) return;
    const int64_t row0 = (int64_t(s) * n_heads + h) * HD + part * E;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      out_rows[row0 + i] = acc[i] / l;
      if (xh) xh[batch_half_index(row0 + i)] = __float2half_rn(acc[i] / l);
    }
    return;
  }
  float* out = partials + ((int64_t(s) * n_heads + h) * chunks + c) * (HD + 2);
  if (sub == 0)
#pragma unroll
    for (int i = 0; i < E; ++i) out[part * E + i] = acc[i];
  if (lane == 0) out[HD] = m, out[HD + 1] = l;
}

// One block per (head, segment): the chunks' partials rescaled to their common max and summed.
// xh (optional): the output's fp16 copy as launch_batch_x_half lays it out (batch_half_index),
// for the O projection's batched matmul.
__global__ void attention_batch_combine_kernel(const AttnSegment* segs, int n_heads, int hd,
                                               int chunk, int chunks, const float* partials,
                                               float* out, __half* xh) {
  pdl_trigger();
  pdl_wait();
  const int h = blockIdx.x, s = blockIdx.y;
  const int used = segs[s].pos / chunk + 1;
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
// serves several query heads (GQA: 2-3x the warp form at 32 sequences, Llama 3's 8 KV heads) or
// the rows are q8_0 (the chunked kernel reads those a block a chunk: 1.6-2x), and where the
// step is small: few (segment, head) rows over few positions leave the warp form too few warps
// and a combine to pay (llama2-7b f16, 8 x 150: 10.9 against 21.5 us). With one query head a KV
// head and 16-bit rows the warp form reads faster from 4 x SMs rows (H200, hearth-cuda-bench
// --attention-batch-only, llama2-7b f16, us: 32 x 150 30.8 against 40.1, 32 x 2048 255.8 against
// 313.2, 64 x 512 137.0 against 164.0), and below that once its 64-position chunks number ~19 an
// SM (us, decode kernels against the warp form: 8 x 512 24.5 / 28.6 and 8 x 2048 81.5 / 77.1;
// 12 x 150 18.8 / 22.7 and 12 x 512 41.3 / 34.7; 16 x 150 20.9 / 24.1, 16 x 512 46.3 / 41.1 and
// 16 x 2048 158.9 / 133.5).
bool decode_kernels_take(int64_t n_segs, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                         DType cache_type, int64_t max_ctx) {
  if (!attention_decode_batch_supported(head_dim, cache_type)) return false;
  if (n_heads != n_kv_heads || cache_type == DType::Q8_0) return true;
  const int64_t rows = n_segs * n_heads, sms = device_sm_count();
  return rows < 4 * sms && rows * ((max_ctx + kChunk - 1) / kChunk) < 19 * sms;
}

// Positions a warp of the warp form takes: 64, or longer (64 x 2^k) while the step still has
// kMinWarpTasks warps (fewer partials to combine where there are warps to spare). One chunk,
// with no combine launch, when every position fits in it. H200, llama2-7b f16 heads
// (hearth-cuda-bench --attention-batch-only --attn-batch B --attn-depth D), us, a warp 64 / 128
// / 256 / 512 positions: 32 x 150 30.6 / 43.4 / 44.9 / 44.9; 32 x 512 74.6 / 72.6 / 91.2 / 146.1;
// 32 x 2048 270.1 / 259.5 / 255.7 / 256.6; 64 x 512 140.8 / 136.9 / 137.8 / 169.6.
constexpr int64_t kMinWarpTasks = 8192;
int chosen_warp_chunk(int64_t n_segs, int64_t n_heads, int64_t max_ctx) {
  int64_t chunk = kChunk;
  while (chunk < max_ctx &&
         n_segs * n_heads * ((max_ctx + 2 * chunk - 1) / (2 * chunk)) >= kMinWarpTasks)
    chunk *= 2;
  return int(chunk);
}

// Whether the warp form's merged blocks (a block a segment's query head, no combine launch)
// take a step: one query head a KV head, rows the warp form reads, at least 256 (segment, head)
// blocks and up to 2,048 positions. There they beat every other kernel (H100, hearth-cuda-bench
// --attention-batch-only, llama2-7b f16, us, merged against the kernel chosen before: 8 x 150
// 11.2 / 12.2 and 8 x 2048 96.2 / 102.3 (the decode kernels); 32 x 150 30.8 / 37.6, 32 x 512
// 91.7 / 99.5, 32 x 2048 351.1 / 363.7; 64 x 150 58.1 / 73.3, 64 x 2048 695.9 / 711.9 (the
// chunked warp form and its combine)). Fewer blocks over longer rows leave SMs idle (the split
// forms keep them busy); deeper rows were not measured.
bool merged_takes(int64_t n_segs, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                  DType cache_type, int64_t max_ctx) {
  const bool rows = cache_type == DType::F16 || cache_type == DType::BF16 ||
                    (cache_type == DType::F32 && head_dim < 256);
  return rows && n_heads == n_kv_heads &&
         attention_batch_supported(head_dim, n_heads, n_kv_heads) && n_segs * n_heads >= 256 &&
         max_ctx <= 2048;
}

int chunks_for(int64_t max_ctx) {
  return int((max_ctx + kChunk - 1) / kChunk);
}

// Whether the chunked kernel's warp form reads these rows (a warp's 16-byte loads cover a row:
// all but f32 at head size 256, and q8_0); elsewhere its block form.
bool warp_form_reads(DType cache_type, int64_t head_dim) {
  return cache_type != DType::Q8_0 && (cache_type != DType::F32 || head_dim < 256);
}

// Whether the warp form's merged blocks take the RoPE and append: one query head a KV head (a
// block appends its own head), no per-head norms.
bool merged_rope_takes(int64_t n_heads, int64_t n_kv_heads, const AttnRope& rope) {
  return n_heads == n_kv_heads && !rope.q_norm && !rope.k_norm &&
         (rope.style == 0 || rope.style == 1);
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

namespace {
// The kernel that runs a step asked for `kernel`: the decode kernels (kDecode) where they take
// it (kChosen: the faster pick, every masked step), the merged blocks (kMerged) where kChosen
// finds merged_takes, else the kernel asked for, kChosen and a kDecode the decode kernels
// cannot run as the chunked kernel.
BatchAttnKernel resolve_kernel(int64_t n_segs, int64_t n_heads, int64_t n_kv_heads,
                               int64_t head_dim, DType cache_type, int64_t max_ctx, bool masked,
                               BatchAttnKernel kernel) {
  const bool chosen = kernel == BatchAttnKernel::kChosen;
  if (chosen && !masked && merged_takes(n_segs, n_heads, n_kv_heads, head_dim, cache_type, max_ctx))
    return BatchAttnKernel::kMerged;
  const bool decode = kernel == BatchAttnKernel::kDecode || (chosen && masked)
                          ? attention_decode_batch_supported(head_dim, cache_type)
                          : chosen && decode_kernels_take(n_segs, n_heads, n_kv_heads, head_dim,
                                                          cache_type, max_ctx);
  if (decode) return BatchAttnKernel::kDecode;
  return chosen || kernel == BatchAttnKernel::kDecode ? BatchAttnKernel::kChunked : kernel;
}
}  // namespace

bool attention_batch_takes_rope(int64_t n_segs, int64_t n_heads, int64_t n_kv_heads,
                                int64_t head_dim, DType cache_type, int64_t max_ctx, bool masked,
                                const AttnRope& rope, BatchAttnKernel kernel) {
  switch (
      resolve_kernel(n_segs, n_heads, n_kv_heads, head_dim, cache_type, max_ctx, masked, kernel)) {
    case BatchAttnKernel::kDecode:
      return attention_rope_fusable(1, head_dim, rope.style) && !rope.q_norm == !rope.k_norm;
    case BatchAttnKernel::kMerged:
      return !masked && warp_form_reads(cache_type, head_dim) &&
             merged_rope_takes(n_heads, n_kv_heads, rope);
    default:
      return false;
  }
}

cudaError_t launch_attention_batch(const float* q, float* out, const AttnSegment* segs,
                                   int64_t n_segs, int64_t max_ctx, int64_t n_heads,
                                   int64_t n_kv_heads, int64_t head_dim, DType cache_type,
                                   float scale, float* partials, cudaStream_t s, void* xh,
                                   BatchAttnKernel kernel, int warp_chunk, const AttnKv& mask,
                                   const AttnRope& rope) {
  if (n_segs <= 0) return cudaSuccess;
  // Sinks, a window, a ring or a soft-cap: only the decode kernels take them.
  const bool masked = mask.masked() || mask.sinks;
  kernel =
      resolve_kernel(n_segs, n_heads, n_kv_heads, head_dim, cache_type, max_ctx, masked, kernel);
  if (kernel == BatchAttnKernel::kDecode)
    return launch_attention_decode_batch(q, segs, n_segs, out, xh, max_ctx, n_heads, n_kv_heads,
                                         head_dim, cache_type, scale, partials, s, mask, rope);
  if (masked) return cudaErrorInvalidValue;
  if (!attention_batch_supported(head_dim, n_heads, n_kv_heads) || max_ctx <= 0 || n_segs > 65535 ||
      !is_cuda_kv_type(cache_type))
    return cudaErrorInvalidValue;
  partials += attention_counter_slots(n_segs, n_heads);
  const dim3 block{kWarps * 32};
  const bool warps =
      kernel != BatchAttnKernel::kChunkedBlocks && warp_form_reads(cache_type, head_dim);
  const int chunk = !warps           ? kChunk
                    : warp_chunk > 0 ? warp_chunk
                                     : chosen_warp_chunk(n_segs, n_heads, max_ctx);
  if (chunk % kChunk != 0) return cudaErrorInvalidValue;
  const int chunks = int((max_ctx + chunk - 1) / chunk);
  const bool merged = warps && kernel == BatchAttnKernel::kMerged;
  // (the rotation and append: only the merged blocks, of one query head a KV head, take them)
  if (rope.k &&
      !(merged && rope.v && rope.inv_freq && merged_rope_takes(n_heads, n_kv_heads, rope)))
    return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorInvalidValue;
  dispatch_kv_form(cache_type, cache_type, [&](auto form) {
    constexpr KvForm F = decltype(form)::value;
    if constexpr (F != KvForm::kMixed) {
      const auto run = [&](auto kernel) {
        const dim3 grid{unsigned(n_heads), unsigned(chunks), unsigned(n_segs)};
        e = launch_pdl(kernel, grid, block, 0, s, q, segs, int(n_heads), int(n_kv_heads), scale,
                       chunks, partials);
      };
      const auto run_warps = [&](auto plain, auto merged_kernel, auto merged_rope) {
        const dim3 grid = merged ? dim3{unsigned(n_heads), 1u, unsigned(n_segs)}
                                 : dim3{unsigned((n_heads + kWarps - 1) / kWarps), unsigned(chunks),
                                        unsigned(n_segs)};
        e = launch_pdl(merged ? (rope.k ? merged_rope : merged_kernel) : plain, grid, block, 0, s,
                       q, segs, int(n_heads), int(n_kv_heads), scale, chunk, chunks, partials, out,
                       static_cast<__half*>(xh), rope);
      };
      if constexpr (F != KvForm::kQ8_0)
        if (warps) {
          switch (head_dim) {
            case 32:
              return run_warps(attention_batch_warp_kernel<F, 32, false>,
                               attention_batch_warp_kernel<F, 32, true>,
                               attention_batch_warp_kernel<F, 32, true, true>);
            case 64:
              return run_warps(attention_batch_warp_kernel<F, 64, false>,
                               attention_batch_warp_kernel<F, 64, true>,
                               attention_batch_warp_kernel<F, 64, true, true>);
            case 128:
              return run_warps(attention_batch_warp_kernel<F, 128, false>,
                               attention_batch_warp_kernel<F, 128, true>,
                               attention_batch_warp_kernel<F, 128, true, true>);
            default:
              if constexpr (F != KvForm::kF32)
                return run_warps(attention_batch_warp_kernel<F, 256, false>,
                                 attention_batch_warp_kernel<F, 256, true>,
                                 attention_batch_warp_kernel<F, 256, true, true>);
          }
        }
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
  // (one chunk, or merged blocks: written directly)
  if (e != cudaSuccess || (warps && (chunks == 1 || merged))) return e;
  return launch_pdl(attention_batch_combine_kernel, dim3(unsigned(n_heads), unsigned(n_segs)),
                    dim3(128), 0, s, segs, int(n_heads), int(head_dim), chunk, chunks,
                    static_cast<const float*>(partials), out, static_cast<__half*>(xh));
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
