// Single-token decode attention at depth (launch_attention's n_tokens == 1 path for f16, bf16
// and q8_0 caches of head_dim 64, 128 or 256): bandwidth-bound, so the K/V rows stream into
// shared memory through a cp.async pipeline of wide copies (16 bytes a lane where the row
// allows) kStages tiles deep, and each warp scores whole rows out of shared memory. A block
// serves G query heads of one KV head (GQA: K/V read once for the group, not once per head);
// blocks split the context into kT-row tiles, split s taking tiles s, s + n_splits, ... (or
// contiguous runs: DecodeProbe), and the
// last block of a row combines the splits' partials as attention.cu's split kernel does (whose
// layout of partials and counters this shares). Short contexts issue all their tiles in the
// prologue: one DRAM round trip, as before. n_ctx is read on the device (one graph per step).
#include <algorithm>
#include <cmath>

#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/attention-softmax.cuh"
#include "kernels/cuda/cp-async.cuh"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope-pair.cuh"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kStages = 4;          // tiles in flight per block (the prologue issues kStages - 1)
constexpr int kStageBytes = 16384;  // K + V bytes of one tile (hd <= 128: 32 rows of f16)

// Row bytes of a head of EPT * 32 elements in form F.
template <KvForm F, int EPT>
constexpr int row_bytes() {
  return F == KvForm::kQ8_0 ? EPT * kQ8Bytes : EPT * 32 * 2;
}

// A lane's elements of a row: P consecutive dims per chunk, chunk c at dims P * lane + 32 P c
// (P = 4, or 2 for head_dim 64), so a lane's reads of a row are one 8-byte (4-byte) load per
// chunk for the 16-bit types and stay inside one q8_0 block.
template <int EPT>
struct Lay {
  static constexpr int P = EPT < 4 ? EPT : 4;
  static constexpr int C = EPT / P;
  __device__ static int dim(int lane, int c, int p) { return P * lane + 32 * P * c + p; }
};

// int8 quants (as a word of 4, offset by 128 each) to f32 without I2F (quarter rate): the byte
// under 0x4B000000 is 2^23 + u, minus 2^23 + 128.
__device__ __forceinline__ float q8_byte(unsigned w, unsigned sel) {
  return __int_as_float(int(__byte_perm(w, 0x4B000000u, 0x7540u | sel))) - 8388736.f;
}

// Lane's EPT elements of a row in shared memory as f32, times for q8_0 the block's scale per
// chunk in d[c] (1 otherwise; the dot and the V update apply it once per chunk).
template <KvForm F, int EPT>
__device__ __forceinline__ void read_row(const uint8_t* row, int lane, float (&x)[EPT],
                                         float (&d)[Lay<EPT>::C]) {
  using L = Lay<EPT>;
#pragma unroll
  for (int c = 0; c < L::C; ++c) {
    const int e = L::dim(lane, c, 0);
    if constexpr (F == KvForm::kQ8_0) {
      const uint8_t* b = row + (e >> 5) * kQ8Bytes;
      d[c] = __half2float(*reinterpret_cast<const __half*>(b));
      const auto* qs = reinterpret_cast<const unsigned short*>(b + 2 + (e & 31));
      unsigned w = qs[0];
      if constexpr (L::P == 4) w = __byte_perm(w, qs[1], 0x5410);
      w ^= 0x80808080u;
#pragma unroll
      for (int p = 0; p < L::P; ++p) x[c * L::P + p] = q8_byte(w, unsigned(p));
    } else {
      d[c] = 1.f;
      unsigned h[L::P / 2];
      if constexpr (L::P == 4) {
        const uint2 u2 = *reinterpret_cast<const uint2*>(row + 2 * e);
        h[0] = u2.x, h[1] = u2.y;
      } else {
        h[0] = *reinterpret_cast<const unsigned*>(row + 2 * e);
      }
#pragma unroll
      for (int p2 = 0; p2 < L::P / 2; ++p2) {
        const unsigned u = h[p2];
        float2 f;
        if constexpr (F == KvForm::kF16)
          f = __half22float2(*reinterpret_cast<const __half2*>(&u));
        else
          f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
        x[c * L::P + 2 * p2] = f.x;
        x[c * L::P + 2 * p2 + 1] = f.y;
      }
    }
  }
}

template <int EPT>
__device__ __forceinline__ void read_cur(const float* cur, int lane, float (&x)[EPT],
                                         float (&d)[Lay<EPT>::C]) {
  using L = Lay<EPT>;
#pragma unroll
  for (int c = 0; c < L::C; ++c) {
    d[c] = 1.f;
#pragma unroll
    for (int p = 0; p < L::P; ++p) x[c * L::P + p] = cur[L::dim(lane, c, p)];
  }
}

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

// Block (brow = KV head x group of G query heads, split). Dynamic shared memory: kStages tiles
// of kT K rows then kT V rows (raw cache bytes), reused for the warps' states at the end.
template <int EPT, KvForm F, int G>
__global__ void __launch_bounds__(kWarps * 32, 2)
    attn_decode_kernel(const float* __restrict__ q, uint8_t* kc, uint8_t* vc, AttnRope rope,
                       float* __restrict__ partials, unsigned* __restrict__ counters,
                       float* __restrict__ out, DecodeQuantOut qo, int64_t pos0_host,
                       const int32_t* pos0_dev, int n_heads, int n_kv_heads, float scale, AttnKv kv,
                       bool runs) {
  using L = Lay<EPT>;
  constexpr int hd = EPT * 32;
  constexpr int kRow = row_bytes<F, EPT>();
  constexpr int kT = kStageBytes / (2 * kRow) >= 32 ? 32 : 16;  // rows per tile
  constexpr int kRpw = kT / kWarps;                             // rows per warp per tile
  constexpr int kGran = kRow % 16 == 0 ? 16 : kRow % 8 == 0 ? 8 : 4;
  constexpr int kRowGran = kRow / kGran;
  static_assert(kWarps * G * (hd + 2) * 4 <= kStages * 2 * kT * kRow, "merge fits the stages");
  extern __shared__ float4 dyn4[];
  auto* stage_mem = reinterpret_cast<uint8_t*>(dyn4);
  __shared__ float sm_q[G][hd];
  __shared__ float sm_kcur[hd], sm_vcur[hd], sm_kraw[hd];
  __shared__ float2 sm_cs[hd / 2];

  pdl_trigger();
  // With the append fused (rope.k set) the kernel reads no row the kernels before it in this
  // step wrote: rows before pcur are earlier steps' (complete before the step began) and row
  // pcur comes from sm_kcur / sm_vcur, not from its staged copy. So the first tiles are issued
  // before waiting for the Q/K/V projection, the DRAM round trip under its tail. pos0_dev is
  // written before the step's first kernel. Without the fusion row pcur is stored by the
  // kernel just before: wait first.
  const bool fused = rope.k != nullptr;
  if (!fused) pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = n_heads / n_kv_heads;
  const int brow = blockIdx.x;
  const int per_kv = group / G;
  const int kvh = brow / per_kv;
  const int h0 = kvh * group + (brow % per_kv) * G;
  const int split = blockIdx.y, n_splits = gridDim.y;
  const int64_t pos0 = pos0_dev ? int64_t(*pos0_dev) : pos0_host;
  const int64_t n_ctx = pos0 + 1, pcur = pos0;
  const int64_t n_tiles = (n_ctx + kT - 1) / kT;
  const int n_live = n_tiles < n_splits ? int(n_tiles) : n_splits;
  if (split >= n_live) return;
  // Tiles dealt round-robin (split s: s, s + n_splits, ...) or, with runs, in contiguous runs.
  const int64_t run_len = n_tiles / n_live, run_extra = n_tiles % n_live;
  const int64_t run0 = split * run_len + (split < run_extra ? split : run_extra);
  const int n_mine =
      runs ? int(run_len + (split < run_extra)) : int((n_tiles - split + n_splits - 1) / n_splits);
  auto tile_pos = [&](int k) {  // first position of this split's tile k
    return (runs ? run0 + k : int64_t(split) + int64_t(k) * n_splits) * kT;
  };
  const int64_t kv_stride = int64_t(n_kv_heads) * kRow;  // bytes between positions
  const uint8_t* kbase = kc + int64_t(kvh) * kRow;
  const uint8_t* vbase = vc + int64_t(kvh) * kRow;

  // Tile k of this split (positions (split + k n_splits) kT ..) into stage k % kStages; rows
  // past n_ctx are not copied (their warps skip them).
  auto issue = [&](int k) {
    const int64_t p0 = tile_pos(k);
    const int rows = n_ctx - p0 < kT ? int(n_ctx - p0) : kT;
    uint8_t* st = stage_mem + (k % kStages) * (2 * kT * kRow);
    for (int idx = threadIdx.x; idx < rows * kRowGran; idx += blockDim.x) {
      const int r = idx / kRowGran, o = (idx % kRowGran) * kGran;
      const int64_t g = (p0 + r) * kv_stride + o;
      cp_async(st + r * kRow + o, kbase + g, kGran);
      cp_async(st + (kT + r) * kRow + o, vbase + g, kGran);
    }
  };
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < n_mine) issue(k);
    cp_async_commit();
  }
  // The rotation's angles need only the position (and the constant frequencies).
  if (fused) {
    for (int j = threadIdx.x; j < hd / 2; j += blockDim.x)
      sm_cs[j] = rope_cos_sin(pcur, rope.inv_freq[j]);
    pdl_wait();
  }

  // q rotated (and this token's k with fused rope) while the first tiles land.
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) (&sm_q[0][0])[i] = q[int64_t(h0) * hd + i];
  if (fused)
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      sm_kraw[d] = rope.k[int64_t(kvh) * hd + d];
      sm_vcur[d] = rope.v[int64_t(kvh) * hd + d];
    }
  __syncthreads();
  float qv[G][EPT];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int c = 0; c < L::C; ++c)
#pragma unroll
      for (int p = 0; p < L::P; ++p) {
        const int d = L::dim(lane, c, p);
        qv[g][c * L::P + p] =
            (fused ? rope_elem(sm_q[g], sm_cs, rope.style, hd, d) : sm_q[g][d]) * scale;
      }
  if (fused) {
    // k rotated, then (warp-collective, whole 32-dim blocks) the append of row pcur by the block
    // that owns its tile, for the first head group of the KV head, and k, v as the cache holds
    // them (the store-then-attend result). Other blocks may copy that row meanwhile: they use
    // sm_kcur / sm_vcur for it instead.
    const bool store =
        brow % per_kv == 0 && split == (runs ? n_live - 1 : int((n_tiles - 1) % n_splits));
    for (int d0 = warp * 32; d0 < hd; d0 += blockDim.x) {
      const int d = d0 + lane;
      const float kr = rope_elem(sm_kraw, sm_cs, rope.style, hd, d);
      const float vr = sm_vcur[d];
      if (store) {
        const int64_t e = pcur * n_kv_heads * hd + int64_t(kvh) * hd + d;
        kv_store_warp(kc, e, kr, kv.k, lane);
        kv_store_warp(vc, e, vr, kv.v, lane);
      }
      sm_kcur[d] = kv_round_warp(kr, kv.k);
      sm_vcur[d] = kv_round_warp(vr, kv.v);
    }
    __syncthreads();
  }

  float m[G], l[G], acc[G][EPT];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < EPT; ++i) acc[g][i] = 0.f;
  }
  for (int k = 0; k < n_mine; ++k) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile k landed for every thread; stage (k - 1) % kStages is free
    if (k + kStages - 1 < n_mine) issue(k + kStages - 1);
    cp_async_commit();
    const int64_t p0 = tile_pos(k) + warp * kRpw;
    const uint8_t* st = stage_mem + (k % kStages) * (2 * kT * kRow) + warp * kRpw * kRow;
    float s[kRpw][G];
#pragma unroll
    for (int j = 0; j < kRpw; ++j) {
      float x[EPT], dq[L::C];
      if (fused && p0 + j == pcur)
        read_cur<EPT>(sm_kcur, lane, x, dq);
      else
        read_row<F, EPT>(st + j * kRow, lane, x, dq);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float part = 0.f;
#pragma unroll
        for (int c = 0; c < L::C; ++c) {
          float pc = 0.f;
#pragma unroll
          for (int p = 0; p < L::P; ++p) pc = fmaf(qv[g][c * L::P + p], x[c * L::P + p], pc);
          part = fmaf(dq[c], pc, part);
        }
        s[j][g] = part;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int j = 0; j < kRpw; ++j)
#pragma unroll
        for (int g = 0; g < G; ++g) s[j][g] += __shfl_xor_sync(0xffffffffu, s[j][g], o);
    const int valid = n_ctx - p0 < kRpw ? int(n_ctx - p0) : kRpw;  // warp-uniform, may be <= 0
    float e[kRpw][G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = m[g];
#pragma unroll
      for (int j = 0; j < kRpw; ++j)
        if (j < valid) mx = fmaxf(mx, s[j][g]);
      const float corr = exp_diff(m[g], mx);
      l[g] *= corr;
#pragma unroll
      for (int i = 0; i < EPT; ++i) acc[g][i] *= corr;
#pragma unroll
      for (int j = 0; j < kRpw; ++j) {
        e[j][g] = j < valid ? __expf(s[j][g] - mx) : 0.f;
        l[g] += e[j][g];
      }
      m[g] = mx;
    }
#pragma unroll
    for (int j = 0; j < kRpw; ++j) {
      if (j >= valid) break;  // rows past n_ctx were not copied: skip, never weigh garbage by 0
      float x[EPT], dv[L::C];
      if (fused && p0 + j == pcur)
        read_cur<EPT>(sm_vcur, lane, x, dv);
      else
        read_row<F, EPT>(st + (kT + j) * kRow, lane, x, dv);
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int c = 0; c < L::C; ++c) {
          const float w = e[j][g] * dv[c];
#pragma unroll
          for (int p = 0; p < L::P; ++p)
            acc[g][c * L::P + p] = fmaf(w, x[c * L::P + p], acc[g][c * L::P + p]);
        }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every stage consumed: reuse the stage memory for the warps' states

  // Merge the warps: per head g, dims in Lay order (the partials take natural order).
  auto* sm_m = reinterpret_cast<float*>(stage_mem);  // [kWarps][G]
  float* sm_l = sm_m + kWarps * G;                   // [kWarps][G]
  float* sm_acc = sm_l + kWarps * G;                 // [kWarps][G][hd]
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < G; ++g) sm_m[warp * G + g] = m[g], sm_l[warp * G + g] = l[g];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int c = 0; c < L::C; ++c)
#pragma unroll
      for (int p = 0; p < L::P; ++p)
        sm_acc[(warp * G + g) * hd + L::dim(lane, c, p)] = acc[g][c * L::P + p];
  __syncthreads();
  __shared__ float s_big[G], s_lt[G];
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float big = -INFINITY, lt = 0.f;
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, sm_m[w * G + g]);
    for (int w = 0; w < kWarps; ++w) lt += sm_l[w * G + g] * exp_diff(sm_m[w * G + g], big);
    s_big[threadIdx.x] = big, s_lt[threadIdx.x] = lt;
  }
  __syncthreads();
  auto merged = [&](int g, int d) {
    float a = 0.f;
    for (int w = 0; w < kWarps; ++w)
      a += sm_acc[(w * G + g) * hd + d] * exp_diff(sm_m[w * G + g], s_big[g]);
    return a;
  };
  // Output element i of the block's G x hd (warp-uniform 32-dim blocks for the int8 copy).
  auto emit = [&](int i, float v) {
    out[int64_t(h0) * hd + i] = v;
    if (qo.q1) quant_block32(v, lane, (int64_t(h0) * hd + i) / 32, qo.q1, qo.q2, qo.scales);
  };
  if (n_live == 1) {
    for (int i0 = warp * 32; i0 < G * hd; i0 += blockDim.x) {
      const int g = i0 / hd, d = i0 % hd + lane;
      emit(i0 + lane, merged(g, d) * softmax_out_factor(s_big[g], s_lt[g], kv.sinks, h0 + g));
    }
    return;
  }
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

  // Hand-off: partials visible device-wide before the count; the last block reads them from L2.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(counters + brow, 1u) == unsigned(n_live - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  __shared__ float sw[G][kDecodeMaxSplits];
  __shared__ float s_inv[G];
  for (int g = warp; g < G; g += kWarps) {
    const float* rp = partials + (int64_t(h0) + g) * n_splits * stride;
    float mv[kDecodeMaxSplits / 32], lv[kDecodeMaxSplits / 32];
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < kDecodeMaxSplits / 32; ++k) {
      const int sp = lane + 32 * k;
      mv[k] = sp < n_live ? __ldcg(rp + sp * stride) : -INFINITY;
      lv[k] = sp < n_live ? __ldcg(rp + sp * stride + 1) : 0.f;
      mx = fmaxf(mx, mv[k]);
    }
    mx = warp_max(mx);
    float lt = 0.f;
#pragma unroll
    for (int k = 0; k < kDecodeMaxSplits / 32; ++k) {
      const float wgt = exp_diff(mv[k], mx);
      sw[g][lane + 32 * k] = wgt;
      lt += lv[k] * wgt;
    }
    lt = warp_sum(lt);
    if (lane == 0) s_inv[g] = softmax_out_factor(mx, lt, kv.sinks, h0 + g);
  }
  if (threadIdx.x == 0) counters[brow] = 0u;
  __syncthreads();
  for (int i0 = warp * 32; i0 < G * hd; i0 += blockDim.x) {
    const int g = i0 / hd, d = i0 % hd + lane;
    const float* rp = partials + (int64_t(h0) + g) * n_splits * stride + 2 + d;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;  // four independent loads in flight
    int sp = 0;
    for (; sp + 4 <= n_live; sp += 4) {
      a0 = fmaf(__ldcg(rp + (sp + 0) * stride), sw[g][sp + 0], a0);
      a1 = fmaf(__ldcg(rp + (sp + 1) * stride), sw[g][sp + 1], a1);
      a2 = fmaf(__ldcg(rp + (sp + 2) * stride), sw[g][sp + 2], a2);
      a3 = fmaf(__ldcg(rp + (sp + 3) * stride), sw[g][sp + 3], a3);
    }
    for (; sp < n_live; ++sp) a0 = fmaf(__ldcg(rp + sp * stride), sw[g][sp], a0);
    emit(i0 + lane, ((a0 + a1) + (a2 + a3)) * s_inv[g]);
  }
}

// Query heads per block: the largest of 8, 4, 2, 1 that divides the group and keeps G x EPT
// (the accumulators and q held per lane) within 16 registers each (8 x 4 spilled).
int heads_per_block(int64_t group, int64_t ept) {
  for (int g : {8, 4, 2, 1})
    if (group % g == 0 && g * ept <= 16) return g;
  return 1;
}

template <class Fn>
bool dispatch_g(int g, Fn&& fn) {
  switch (g) {
    case 8:
      return fn(std::integral_constant<int, 8>{}), true;
    case 4:
      return fn(std::integral_constant<int, 4>{}), true;
    case 2:
      return fn(std::integral_constant<int, 2>{}), true;
    default:
      return fn(std::integral_constant<int, 1>{}), true;
  }
}

// Splits per row: one wave of every block the SMs hold at once (blocks_per_sm, the occupancy of
// the instance), so each split gets equal work (tiles dealt round-robin) and none waits for a
// second wave. On the H200 this beat two blocks an SM where more fit (llama2-7b one layer at
// d8192: f16 three an SM 48.1 us against two 63.0, q8_0 four 52.3 against 78.3).
int64_t decode_splits(int64_t brows, int blocks_per_sm, int64_t max_ctx) {
  int64_t want = int64_t(blocks_per_sm) * device_sm_count() / brows;
  want = want < 1 ? 1 : want > kDecodeMaxSplits ? kDecodeMaxSplits : want;
  const int64_t tiles = (max_ctx + 15) / 16;
  return tiles < want ? (tiles > 0 ? tiles : 1) : want;
}

}  // namespace

bool attention_decode_supported(int64_t head_dim, DType k, DType v, const void* k_cache,
                                const void* v_cache) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  if (k != v || (k != DType::F16 && k != DType::BF16 && k != DType::Q8_0)) return false;
  // cp.async granules: 4-byte alignment of both caches covers every row size here.
  return (reinterpret_cast<uintptr_t>(k_cache) & 15) == 0 &&
         (reinterpret_cast<uintptr_t>(v_cache) & 15) == 0;
}

cudaError_t launch_attention_decode(const float* q, void* k_cache, void* v_cache, float* out,
                                    int64_t pos0, const int32_t* pos0_dev, int64_t max_ctx,
                                    int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                    float scale, float* partials, unsigned* counters,
                                    cudaStream_t s, DecodeQuantOut qo, const AttnRope& rope,
                                    const AttnKv& kv, DecodeProbe probe) {
  const int g = heads_per_block(n_heads / n_kv_heads, head_dim / 32);
  auto* kc = static_cast<uint8_t*>(k_cache);
  auto* vc = static_cast<uint8_t*>(v_cache);
  cudaError_t err = cudaSuccess;
  auto go = [&](auto ept, auto form, auto gc) {
    constexpr int E = decltype(ept)::value;
    constexpr KvForm F = decltype(form)::value;
    auto* kernel = attn_decode_kernel<E, F, decltype(gc)::value>;
    constexpr int kRow = row_bytes<F, E>();
    constexpr int kT = kStageBytes / (2 * kRow) >= 32 ? 32 : 16;
    const size_t smem = size_t(kStages) * 2 * kT * kRow;
    static int per_sm = 0;  // per instance, once: the opt-in above 48 KB, then the occupancy
    if (per_sm == 0) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      if (err == cudaSuccess && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                     &per_sm, kernel, kWarps * 32, smem) != cudaSuccess ||
                                 per_sm < 1))
        per_sm = 2;
    }
    const int64_t splits = probe.splits > 0 ? std::min<int64_t>(probe.splits, kDecodeMaxSplits)
                                            : decode_splits(n_heads / g, per_sm, max_ctx);
    const dim3 grid(unsigned(n_heads / g), unsigned(splits));
    if (err == cudaSuccess)
      err =
          launch_pdl(kernel, grid, dim3(kWarps * 32), smem, s, q, kc, vc, rope, partials, counters,
                     out, qo, pos0, pos0_dev, int(n_heads), int(n_kv_heads), scale, kv, probe.runs);
  };
  auto by_form = [&](auto ept, auto gc) {
    if (kv.k == DType::F16)
      go(ept, std::integral_constant<KvForm, KvForm::kF16>{}, gc);
    else if (kv.k == DType::BF16)
      go(ept, std::integral_constant<KvForm, KvForm::kBF16>{}, gc);
    else
      go(ept, std::integral_constant<KvForm, KvForm::kQ8_0>{}, gc);
  };
  dispatch_g(g, [&](auto gc) {
    constexpr int G = decltype(gc)::value;
    if (head_dim == 64) by_form(std::integral_constant<int, 2>{}, gc);
    if constexpr (G * 4 <= 16)
      if (head_dim == 128) by_form(std::integral_constant<int, 4>{}, gc);
    if constexpr (G * 8 <= 16)
      if (head_dim == 256) by_form(std::integral_constant<int, 8>{}, gc);
  });
  return err;
}

}  // namespace hearth::cuda
