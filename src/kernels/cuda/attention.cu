// Causal attention on CUDA over the KV cache [ctx, n_kv_heads, head_dim] (ops.h), its rows of any
// cache type read in place (kv-rows.cuh), with gpt-oss's sinks in the final normalisation.
// Decode of f16 / bf16 / q8_0 caches (head_dim 64, 128, 256): attention-decode.cu. Other
// decode and small batches: split-K over the context (blocks per (query, head) take 64-position
// chunks, each warp an online softmax; the last block of a row combines, or a lone block writes
// out itself). Prefill: head_dim 64/128 go to the tensor-core kernel (attention-prefill.cu);
// other widths to flash-style fp32 tiles of 16 queries x 32 keys here. head_dim <= 256.
#include <cmath>

#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/attention-softmax.cuh"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rms-scale.cuh"
#include "kernels/cuda/rope-pair.cuh"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

namespace {

constexpr int kChunk = 64;      // context positions per split (short decode contexts still
                                // spread over several blocks per head)
constexpr int kSplitWarps = 8;  // warps per split block
constexpr int kMaxSplits = kDecodeMaxSplits;  // split blocks per (query, head) row
constexpr int kFlashQ = 16;                   // queries per flash block (4 warps x kQW)
constexpr int kQW = 4;                        // queries per warp
constexpr int kFlashK = 32;                   // keys per shared-memory tile (one per lane)
constexpr int64_t kFlashMinTokens = 8;

// qo (optional): q1, q2, scales of the int8 activations of `out` (quantized per 32 dims; a warp
// owns each 32-dim block since hd % 32 == 0 whenever qo is given).
using QuantOut = DecodeQuantOut;

// Rotates a head's row held as v[i] = x[lane + 32 i] (hd == 32 * EPT), cos/sin of pair j in
// cs[j] (angles in double as rope.cu, once per block). Interleaved pairs (2j, 2j+1) sit in
// neighbouring lanes; halves pairs (j, j + hd/2) in the same lane, EPT/2 registers apart
// (attention_rope_fusable() checks).
template <int EPT>
__device__ __forceinline__ void rope_rows_tab(float (&v)[EPT], const float2* cs, int style,
                                              int lane) {
  float out[EPT];
#pragma unroll
  for (int i = 0; i < EPT; ++i) {
    const int d = lane + 32 * i;
    int j;
    bool first;
    float partner;
    if (style == 0) {
      j = d >> 1;
      first = (d & 1) == 0;
      partner = __shfl_xor_sync(0xffffffffu, v[i], 1);
    } else {
      constexpr int kHalf = EPT / 2;
      first = i < kHalf;
      j = first ? d : d - 32 * kHalf;
      partner = EPT % 2 == 0 ? v[first ? (i + kHalf) % EPT : (i + EPT - kHalf) % EPT] : 0.f;
    }
    const float2 t = cs[j];
    out[i] = first ? v[i] * t.x - partner * t.y : partner * t.y + v[i] * t.x;
  }
#pragma unroll
  for (int i = 0; i < EPT; ++i) v[i] = out[i];
}

// Block (row th = query t x head h, split): an online softmax over context chunks split,
// split + n_splits, ... (kChunk positions each) into the partial [m, l, acc[hd]] (acc
// unnormalised relative to m). Only ceil(n_ctx / kChunk) splits are live, n_ctx read on the
// device, so one graph serves every position while short contexts launch almost nothing. The
// last live block of a row to finish (a per-row counter, left at zero again) combines the
// row's live partials and writes out (and its int8 activations for the O projection).
// Decode is latency-bound: each warp loads all K and V rows of its round (kKpw keys; with
// head_dim <= 128 a whole 64-position chunk per block in one round) at once, before q's rope,
// and the rope angles are computed once per block, so a block makes one DRAM round trip.
// K/V rows of form F (kv-rows.cuh): lane l reads dims l + 32 i of each row, so a warp's loads
// of one row are contiguous whatever the element size.
template <int EPT, KvForm F>
__global__ void __launch_bounds__(kSplitWarps * 32, 2)
    attn_split_kernel(const float* __restrict__ q, uint8_t* kc, uint8_t* vc, AttnRope rope,
                      float* __restrict__ partials, unsigned* __restrict__ counters,
                      float* __restrict__ out, QuantOut qo, int64_t pos0_host,
                      const int32_t* pos0_dev, int n_heads, int n_kv_heads, int hd, float scale,
                      AttnKv kv) {
  // Keys per warp per round (registers: 2 x kKpw x EPT raw elements; a q8_0 element is two, its
  // quant and its block's scale, so it takes half the keys for the same loads in flight).
  constexpr int kKpw = (EPT <= 4 ? 8 : 4) / (F == KvForm::kQ8_0 ? 2 : 1);
  constexpr int kRound = kSplitWarps * kKpw;
  pdl_trigger();
  pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t th = blockIdx.x;
  const int split = blockIdx.y, n_splits = gridDim.y;
  const int64_t t = th / n_heads;
  const int h = int(th % n_heads);
  const int kvh = h / (n_heads / n_kv_heads);
  const int64_t pos0 = pos0_dev ? int64_t(*pos0_dev) : pos0_host;
  const int64_t n_ctx = pos0 + t + 1;
  const int64_t n_chunks = (n_ctx + kChunk - 1) / kChunk;
  const int n_live = n_chunks < n_splits ? int(n_chunks) : n_splits;
  if (split >= n_live) return;
  const int64_t kv_stride = int64_t(n_kv_heads) * hd;
  const int64_t head_e = int64_t(kvh) * hd;

  float qv[EPT], acc[EPT];
#pragma unroll
  for (int i = 0; i < EPT; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < hd ? q[th * hd + d] : 0.f;
    acc[i] = 0.f;
  }
  const int64_t pcur = n_ctx - 1;
  float kcur[EPT], vcur[EPT];
  if (rope.k) {
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
      const int d = lane + 32 * i;
      kcur[i] = d < hd ? rope.k[int64_t(kvh) * hd + d] : 0.f;
      vcur[i] = d < hd ? rope.v[int64_t(kvh) * hd + d] : 0.f;
    }
  }
  // The warp's rounds: positions base .. base + kKpw - 1 (those from end on score -inf) of
  // chunk, kRound apart within a chunk, then chunk += n_splits.
  int64_t chunk = split;
  int64_t end = (chunk + 1) * kChunk < n_ctx ? (chunk + 1) * kChunk : n_ctx;
  int64_t base = chunk * kChunk + warp * kKpw;
  bool have = base < end;
  KvRaw<F> kr[kKpw][EPT], vr[kKpw][EPT];  // widened where used (KvRaw: loads stay in flight)
  auto load_round = [&]() {               // rows past end read as zeros (they score -inf, weigh 0)
    const int64_t n_rows = end - base;
#pragma unroll
    for (int j = 0; j < kKpw; ++j) {
      const int64_t e0 = (base + j) * kv_stride + head_e;
#pragma unroll
      for (int i = 0; i < EPT; ++i) {
        if (j < n_rows && lane + 32 * i < hd) {
          kr[j][i].load(kc, e0, i, lane, kv.k);
          vr[j][i].load(vc, e0, i, lane, kv.v);
        } else {
          kr[j][i].zero();
          vr[j][i].zero();
        }
      }
    }
  };
  if (have) load_round();  // in flight while the rope angles are computed

  // Fused decode rope: q and this token's k rotated here, its k/v used from registers (the
  // cache row is written just below by one block per KV head, and read by the next step).
  __shared__ float2 sm_cs[128];
  if (rope.k) {
    for (int j = threadIdx.x; j < hd / 2; j += blockDim.x)
      sm_cs[j] = rope_cos_sin(pcur, rope.inv_freq[j]);
    if (rope.q_norm) {  // per-head norms first (rmsnorm_heads' bits; q and k are in L2)
      const float qs = warp_rms_scale(q + th * hd, hd, rope.norm_eps, lane);
      const float ks = warp_rms_scale(rope.k + int64_t(kvh) * hd, hd, rope.norm_eps, lane);
#pragma unroll
      for (int i = 0; i < EPT; ++i) {
        const int d = lane + 32 * i;  // < hd: hd == 32 * EPT (attention_rope_fusable)
        qv[i] = qv[i] * qs * __ldg(rope.q_norm + d);
        kcur[i] = kcur[i] * ks * __ldg(rope.k_norm + d);
      }
    }
    __syncthreads();
    rope_rows_tab<EPT>(qv, sm_cs, rope.style, lane);
    rope_rows_tab<EPT>(kcur, sm_cs, rope.style, lane);
    // The block holding the current position, for the first head of each KV group, appends it
    // (hd == 32 * EPT here: attention_rope_fusable, so whole warps store whole q8_0 blocks).
    // Other blocks may load that row meanwhile, but use kcur / vcur instead of what they read.
    if (warp == 0 && h % (n_heads / n_kv_heads) == 0 && split == int((n_chunks - 1) % n_splits)) {
#pragma unroll
      for (int i = 0; i < EPT; ++i) {
        const int64_t e = pcur * kv_stride + head_e + lane + 32 * i;
        kv_store_warp(kc, e, kcur[i], kv.k, lane);
        kv_store_warp(vc, e, vcur[i], kv.v, lane);
      }
    }
    // Attend to this token's k and v as the cache will hold them (the unfused store-then-attend
    // result; hd == 32 * EPT, so whole warps round whole q8_0 blocks).
    if constexpr (F != KvForm::kF32) {
#pragma unroll
      for (int i = 0; i < EPT; ++i) {
        kcur[i] = kv_round_warp(kcur[i], kv.k);
        vcur[i] = kv_round_warp(vcur[i], kv.v);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < EPT; ++i) qv[i] *= scale;
  float m = -INFINITY, l = 0.f;
  while (have) {
    float s[kKpw];
    bool cur[kKpw];
#pragma unroll
    for (int j = 0; j < kKpw; ++j) {
      cur[j] = rope.k && base + j == pcur;  // that cache row is not written yet: use kcur / vcur
      float part = 0.f;
#pragma unroll
      for (int i = 0; i < EPT; ++i) part = fmaf(qv[i], cur[j] ? kcur[i] : kr[j][i].value(), part);
      s[j] = part;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {  // kKpw independent butterflies, interleaved
#pragma unroll
      for (int j = 0; j < kKpw; ++j) s[j] += __shfl_xor_sync(0xffffffffu, s[j], o);
    }
    float mx = m;
#pragma unroll
    for (int j = 0; j < kKpw; ++j) {
      if (base + j >= end) s[j] = -INFINITY;
      mx = fmaxf(mx, s[j]);
    }
    const float corr = exp_diff(m, mx);
    l *= corr;
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc[i] *= corr;
#pragma unroll
    for (int j = 0; j < kKpw; ++j) {
      const float e = base + j < end ? __expf(s[j] - mx) : 0.f;
      l += e;
#pragma unroll
      for (int i = 0; i < EPT; ++i) acc[i] = fmaf(e, cur[j] ? vcur[i] : vr[j][i].value(), acc[i]);
    }
    m = mx;
    base += kRound;
    if (base >= end) {
      chunk += n_splits;
      end = (chunk + 1) * kChunk < n_ctx ? (chunk + 1) * kChunk : n_ctx;
      base = chunk * kChunk + warp * kKpw;
      have = chunk < n_chunks && base < end;
    }
    if (have) load_round();
  }
  __shared__ WarpStates<kSplitWarps, EPT> sm;
  const float big = share_warp_states(sm, m, l, acc, warp, lane);
  auto merged = [&](int d) {  // this block's warps' acc for dim d, relative to big
    float a = 0.f;
    for (int w = 0; w < kSplitWarps; ++w) a += sm.acc[w][d] * exp_diff(sm.m[w], big);
    return a;
  };
  if (n_live == 1) {
    // The whole context (<= kChunk positions) was this block's: normalise and write out here,
    // skipping the partials, the fence and the counter (a dependent round trip each).
    float lt = 0.f;
    for (int w = 0; w < kSplitWarps; ++w) lt += sm.l[w] * exp_diff(sm.m[w], big);
    const float inv = softmax_out_factor(big, lt, kv.sinks, h);
    if (qo.q1) {
      for (int d0 = warp * 32; d0 < hd; d0 += blockDim.x) {  // warp-uniform: whole 32-dim blocks
        const float v = merged(d0 + lane) * inv;
        out[th * hd + d0 + lane] = v;
        quant_block32(v, lane, (th * hd + d0) / 32, qo.q1, qo.q2, qo.scales);
      }
      return;
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) out[th * hd + d] = merged(d) * inv;
    return;
  }
  const int64_t stride = hd + 2;
  float* row_parts = partials + th * n_splits * stride;
  float* mine = row_parts + split * stride;
  if (threadIdx.x == 0) {
    float lt = 0.f;
    for (int w = 0; w < kSplitWarps; ++w) lt += sm.l[w] * exp_diff(sm.m[w], big);
    mine[0] = big;
    mine[1] = lt;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) mine[2 + d] = merged(d);

  if (!last_split_to_arrive(counters + th, n_live)) return;
  __shared__ float sw[kMaxSplits];
  __shared__ float s_inv;
  if (warp == 0) {
    const float2 ml = split_weights<kMaxSplits>(row_parts, n_live, stride, sw, lane);
    const float mx = ml.x, lt = ml.y;
    if (lane == 0) s_inv = softmax_out_factor(mx, lt, kv.sinks, h), counters[th] = 0u;
  }
  __syncthreads();
  const float inv = s_inv;
  auto combined = [&](int d) {
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;  // four independent loads in flight
    int sp = 0;
    for (; sp + 4 <= n_live; sp += 4) {
      a0 = fmaf(__ldcg(row_parts + (sp + 0) * stride + 2 + d), sw[sp + 0], a0);
      a1 = fmaf(__ldcg(row_parts + (sp + 1) * stride + 2 + d), sw[sp + 1], a1);
      a2 = fmaf(__ldcg(row_parts + (sp + 2) * stride + 2 + d), sw[sp + 2], a2);
      a3 = fmaf(__ldcg(row_parts + (sp + 3) * stride + 2 + d), sw[sp + 3], a3);
    }
    for (; sp < n_live; ++sp) a0 = fmaf(__ldcg(row_parts + sp * stride + 2 + d), sw[sp], a0);
    return ((a0 + a1) + (a2 + a3)) * inv;
  };
  if (qo.q1) {
    for (int d0 = warp * 32; d0 < hd; d0 += blockDim.x) {  // warp-uniform: whole 32-dim blocks
      const float v = combined(d0 + lane);
      out[th * hd + d0 + lane] = v;
      quant_block32(v, lane, (th * hd + d0) / 32, qo.q1, qo.q2, qo.scales);
    }
    return;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) out[th * hd + d] = combined(d);
}

// Block = (tile of kFlashQ queries, head); 4 warps x kQW queries; lane j scores key j of a tile.
// K/V tiles are widened to f32 in shared memory, the cache type switched at run time (kMixed:
// one instance per width for every type; only the odd head sizes of prefill come here).
template <int EPT>
__global__ void __launch_bounds__(128)
    attn_flash_kernel(const float* __restrict__ q, const uint8_t* __restrict__ kc,
                      const uint8_t* __restrict__ vc, float* __restrict__ out, int64_t n_tokens,
                      int64_t pos0, int n_heads, int n_kv_heads, int hd, float scale, AttnKv kv) {
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
        const int64_t e = p * kv_stride + int64_t(kvh) * hd + 4 * d4;
        kv4 = kv_load4<KvForm::kMixed>(kc, e, kv.k);
        vv4 = kv_load4<KvForm::kMixed>(vc, e, kv.v);
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
    const float inv = softmax_out_factor(m[a], l[a], kv.sinks, h);
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) out[(t * n_heads + h) * hd + d] = acc[a][i] * inv;
    }
  }
}

// Splits per row: enough blocks to fill the chip over all rows, at most one per chunk. Long
// contexts give each split several chunks instead of more blocks.
int64_t split_count(int64_t rows, int64_t max_ctx) {
  const int64_t chunks = (max_ctx + kChunk - 1) / kChunk;
  int64_t want = 512 / (rows > 0 ? rows : 1);
  want = want < 16 ? 16 : want > kMaxSplits ? kMaxSplits : want;
  return chunks < want ? (chunks > 0 ? chunks : 1) : want;
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

bool attention_rope_fusable(int64_t n_tokens, int64_t head_dim, int style) {
  if (n_tokens != 1 || head_dim % 32 != 0 || head_dim > 256) return false;
  const int64_t ept = head_dim / 32;
  if (ept == 5 || ept == 7) return false;  // no kernel of exactly that width (dispatch_ept)
  return style == 0 || (style == 1 && ept % 2 == 0);
}

int64_t attention_counter_slots(int64_t n_tokens, int64_t n_heads) {
  return (n_tokens * n_heads + 63) / 64 * 64;
}

int64_t attention_partials_floats(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                  int64_t max_ctx) {
  if (use_flash(n_tokens, head_dim)) return 0;
  const int64_t rows = n_tokens * n_heads;
  // One token: room for either kernel's splits (the decode kernel's depend on the KV heads).
  const int64_t splits = n_tokens == 1 ? kDecodeMaxSplits : split_count(rows, max_ctx);
  return attention_counter_slots(n_tokens, n_heads) + rows * splits * (head_dim + 2);
}

namespace {

cudaError_t attention_impl(const float* q, const void* k_cache, const void* v_cache, float* out,
                           int64_t n_tokens, int64_t pos0, const int32_t* pos0_dev, int64_t max_ctx,
                           int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                           float* partials, cudaStream_t s, void* qbuf, const AttnRope* rope,
                           const AttnKv& kv, int decode, DecodeProbe probe = {}) {
  if (n_tokens <= 0) return cudaSuccess;
  if (head_dim > 256 || head_dim <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 ||
      !is_cuda_kv_type(kv.k) || !is_cuda_kv_type(kv.v) ||
      ((kv.k == DType::Q8_0 || kv.v == DType::Q8_0) && head_dim % 32 != 0))
    return cudaErrorInvalidValue;
  // A mask (window, ring, soft-cap) or a scaled rotation only where the decode kernels run: the
  // others would ignore them.
  const bool decode_kernel = decode >= 0 && n_tokens == 1 &&
                             attention_decode_supported(head_dim, kv.k, kv.v, k_cache, v_cache);
  if ((kv.masked() || (rope && rope->mscale != 1.f)) && !decode_kernel)
    return cudaErrorInvalidValue;
  if (kv.window < 0 || kv.ring_rows < 0 || kv.softcap < 0 ||
      (kv.ring_rows > 0 && (kv.window == 0 || kv.window > kv.ring_rows)))
    return cudaErrorInvalidValue;
  const auto* kc = static_cast<const uint8_t*>(k_cache);
  const auto* vc = static_cast<const uint8_t*>(v_cache);
  if (use_flash(n_tokens, head_dim) && !pos0_dev) {
    if (attention_prefill_tc_supported(head_dim))
      return launch_attention_prefill_tc(q, k_cache, v_cache, out, n_tokens, pos0, n_heads,
                                         n_kv_heads, head_dim, scale, s, kv);
    const size_t smem =
        size_t(kFlashQ * head_dim + kFlashK * (head_dim + 4) + kFlashK * head_dim) * sizeof(float);
    const dim3 grid(unsigned((n_tokens + kFlashQ - 1) / kFlashQ), unsigned(n_heads));
    cudaError_t err = cudaSuccess;
    dispatch_ept(head_dim, [&](auto ept) {
      auto* kernel = attn_flash_kernel<decltype(ept)::value>;
      if (smem > 48 * 1024)
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (err == cudaSuccess)
        kernel<<<grid, 128, smem, s>>>(q, kc, vc, out, n_tokens, pos0, int(n_heads),
                                       int(n_kv_heads), int(head_dim), scale, kv);
    });
    return err != cudaSuccess ? err : cudaGetLastError();
  }
  if (!partials) return cudaErrorInvalidValue;
  AttnRope fused;
  if (rope) {
    if (!attention_rope_fusable(n_tokens, head_dim, rope->style) || !rope->k || !rope->v ||
        !rope->inv_freq || !rope->q_norm != !rope->k_norm)
      return cudaErrorInvalidValue;
    fused = *rope;
  }
  QuantOut qo;
  if (qbuf) {
    if (head_dim % 32 != 0) return cudaErrorInvalidValue;
    const QuantizedActs v = quantized_acts_view(qbuf, n_tokens, n_heads * head_dim);
    qo = {const_cast<int8_t*>(v.q1), const_cast<int8_t*>(v.q2),
          reinterpret_cast<float4*>(const_cast<float*>(v.scales))};
  }
  auto* counters = reinterpret_cast<unsigned*>(partials);
  float* parts = partials + attention_counter_slots(n_tokens, n_heads);
  // decode >= 0: the decode kernel wherever it applies (with the probe's grid when set), -1:
  // never (the bench's baseline).
  if (decode_kernel)
    return launch_attention_decode(q, const_cast<void*>(k_cache), const_cast<void*>(v_cache), out,
                                   pos0, pos0_dev, max_ctx, n_heads, n_kv_heads, head_dim, scale,
                                   parts, counters, s, qo, fused, kv, probe);
  const int64_t rows = n_tokens * n_heads;
  const dim3 grid(unsigned(rows), unsigned(split_count(rows, max_ctx)));
  cudaError_t err = cudaSuccess;
  dispatch_ept(head_dim, [&](auto ept) {
    dispatch_kv_form(kv.k, kv.v, [&](auto form) {
      // The caches are written only with a fused rope (the append of this token's row).
      err = launch_pdl(attn_split_kernel<decltype(ept)::value, decltype(form)::value>, grid,
                       dim3(kSplitWarps * 32), 0, s, q, const_cast<uint8_t*>(kc),
                       const_cast<uint8_t*>(vc), fused, parts, counters, out, qo, pos0, pos0_dev,
                       int(n_heads), int(n_kv_heads), int(head_dim), scale, kv);
    });
  });
  return err;
}

}  // namespace

cudaError_t launch_attention(const float* q, const void* k_cache, const void* v_cache, float* out,
                             int64_t n_tokens, int64_t pos0, const int32_t* pos0_dev,
                             int64_t max_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                             float scale, float* partials, cudaStream_t s, void* qbuf,
                             const AttnRope* rope, const AttnKv& kv) {
  return attention_impl(q, k_cache, v_cache, out, n_tokens, pos0, pos0_dev, max_ctx, n_heads,
                        n_kv_heads, head_dim, scale, partials, s, qbuf, rope, kv, 0);
}

cudaError_t launch_attention_split(const float* q, const void* k_cache, const void* v_cache,
                                   float* out, int64_t n_tokens, int64_t pos0,
                                   const int32_t* pos0_dev, int64_t max_ctx, int64_t n_heads,
                                   int64_t n_kv_heads, int64_t head_dim, float scale,
                                   float* partials, cudaStream_t s, void* qbuf,
                                   const AttnRope* rope, const AttnKv& kv) {
  return attention_impl(q, k_cache, v_cache, out, n_tokens, pos0, pos0_dev, max_ctx, n_heads,
                        n_kv_heads, head_dim, scale, partials, s, qbuf, rope, kv, -1);
}

cudaError_t launch_attention_probe(const float* q, const void* k_cache, const void* v_cache,
                                   float* out, int64_t pos0, const int32_t* pos0_dev,
                                   int64_t max_ctx, int64_t n_heads, int64_t n_kv_heads,
                                   int64_t head_dim, float scale, float* partials, cudaStream_t s,
                                   void* qbuf, const AttnRope* rope, const AttnKv& kv,
                                   int decode_splits, bool decode_runs, bool decode_scalar) {
  return attention_impl(q, k_cache, v_cache, out, 1, pos0, pos0_dev, max_ctx, n_heads, n_kv_heads,
                        head_dim, scale, partials, s, qbuf, rope, kv, 1,
                        {decode_splits, decode_runs, decode_scalar});
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
