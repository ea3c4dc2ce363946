// Single-token decode attention at depth (launch_attention's n_tokens == 1 path for f16, bf16
// and q8_0 caches of head_dim 64, 128 or 256), the scalar kernel: f16 and q8_0 rows of head_dim
// 64 / 128 go to the tensor-core kernel (attention-decode-mma.cu) instead, so this one serves
// bf16 rows, head_dim 256, one sequence with 8+ query heads a KV head over a short cache
// (launch_attention_decode) and the probes. The K/V rows stream into shared memory through a
// cp.async pipeline of wide copies (16 bytes a lane where the row allows) kStages tiles deep, and
// each warp scores whole rows out of shared memory. A block serves G query heads of one KV head
// (GQA: K/V read once for the group, not once per head); blocks split the context into kT-row
// tiles, split s taking tiles s, s + n_splits, ... (or contiguous runs: DecodeProbe), and the
// last block of a row combines the splits' partials as attention.cu's split kernel does (whose
// layout of partials and counters this shares). Short contexts issue all their tiles in the
// prologue: one DRAM round trip, as before. n_ctx is read on the device (one graph per step).
#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention-decode-block.cuh"
#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/attention-softmax.cuh"
#include "kernels/cuda/cp-async.cuh"
#include "kernels/cuda/kernel-modules.cuh"
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

// Block (brow = KV head x group of G query heads, split). Dynamic shared memory: kStages tiles
// of kT K rows then kT V rows (raw cache bytes), reused for the warps' states at the end.
template <int EPT, KvForm F, int G>
__global__ void __launch_bounds__(kWarps * 32, 2)
    attn_decode_kernel(const float* __restrict__ q, uint8_t* kc, uint8_t* vc, AttnRope rope,
                       float* __restrict__ partials, unsigned* __restrict__ counters,
                       float* __restrict__ out, DecodeQuantOut qo, int64_t pos0_host,
                       const int32_t* pos0_dev, int n_heads, int n_kv_heads, float scale, AttnKv kv,
                       bool runs, DecodeSegments segs) {
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
  __shared__ __align__(16) float sm_q[G][hd];
  __shared__ __align__(16) float sm_kraw[hd];
  __shared__ float sm_kcur[hd], sm_vcur[hd];
  __shared__ float2 sm_cs[hd / 2];

  // A step of many sequences lets the kernel after it (the O projection's matmul) launch only
  // from its blocks' ends: launched at once, that kernel's blocks sat beside these waiting and
  // the lockstep steps ran 5-9% slower than with the chunked kernel (session 40).
  if (!segs.segs) pdl_trigger();
  // With the append fused (rope.k set) the kernel reads no row the kernels before it in this
  // step wrote: rows before pcur are earlier steps' (complete before the step began) and row
  // pcur comes from sm_kcur / sm_vcur, not from its staged copy. So the first tiles are issued
  // before waiting for the Q/K/V projection, the DRAM round trip under its tail. pos0_dev is
  // written before the step's first kernel. Without the fusion row pcur is stored by the
  // kernel just before: wait first.
  const bool fused = rope.k != nullptr;
  // A step of many sequences reads its descriptors first: the kernel before (the table's
  // upload, a kernel in the same PDL chain) writes them.
  if (!fused || segs.segs) pdl_wait();
  const int64_t out0 = take_segment(segs, n_heads, n_kv_heads, hd, q, kc, vc, pos0_dev, out,
                                    partials, counters, rope);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const DecodeTiles b = decode_tiles<G>(kT, n_heads, n_kv_heads, pos0_host, pos0_dev, runs, kv);
  if (!b.live()) return;
  const int kvh = b.kvh, h0 = b.h0, n_mine = b.n_mine;
  const int64_t n_ctx = b.n_ctx, pcur = b.pcur, icur = n_ctx - 1;  // icur: pcur's visible index
  const int64_t kv_stride = int64_t(n_kv_heads) * kRow;            // bytes between positions
  const uint8_t* kbase = kc + int64_t(kvh) * kRow;
  const uint8_t* vbase = vc + int64_t(kvh) * kRow;

  // Tile k of this split (visible indices (split + k n_splits) kT ..) into stage k % kStages;
  // rows past n_ctx are not copied (their warps skip them).
  auto issue = [&](int k) {
    const int64_t p0 = b.pos(k, kT);
    const int rows = n_ctx - p0 < kT ? int(n_ctx - p0) : kT;
    uint8_t* st = stage_mem + (k % kStages) * (2 * kT * kRow);
    const int64_t row0 = b.row(p0);
    const int wrap = b.wrap_at(p0);
    for (int idx = threadIdx.x; idx < rows * kRowGran; idx += blockDim.x) {
      const int r = idx / kRowGran, o = (idx % kRowGran) * kGran;
      const int64_t g = (row0 + (r >= wrap ? r - b.ring : r)) * kv_stride + o;
      cp_async(st + r * kRow + o, kbase + g, kGran);
      cp_async(st + (kT + r) * kRow + o, vbase + g, kGran);
    }
  };
  issue_first_tiles<kStages>(n_mine, issue);
  if (fused) rope_angles_then_wait<hd>(rope, pcur, sm_cs);

  // q rotated (and this token's k with fused rope) while the first tiles land.
  load_q_kv<G, hd, kWarps>(q, rope, h0, kvh, sm_q, sm_kraw, sm_vcur);
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
    // Other blocks may copy row pcur meanwhile: they use sm_kcur / sm_vcur for it instead.
    rotate_append_kv<hd, F>(rope, sm_kraw, sm_cs, sm_kcur, sm_vcur, b.appends(), kc, vc,
                            b.cur_row(), n_kv_heads, kvh);
    __syncthreads();
  }

  const float two_over_cap = kv.softcap > 0.f ? 2.f / kv.softcap : 0.f;
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
    const int64_t p0 = b.pos(k, kT) + warp * kRpw;
    const uint8_t* st = stage_mem + (k % kStages) * (2 * kT * kRow) + warp * kRpw * kRow;
    float s[kRpw][G];
#pragma unroll
    for (int j = 0; j < kRpw; ++j) {
      float x[EPT], dq[L::C];
      if (fused && p0 + j == icur)
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
    if (kv.softcap > 0.f)
#pragma unroll
      for (int j = 0; j < kRpw; ++j)
#pragma unroll
        for (int g = 0; g < G; ++g) s[j][g] = capped_score(s[j][g], kv.softcap, two_over_cap);
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
      if (fused && p0 + j == icur)
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
  if (segs.segs) pdl_trigger();
  finish_decode_block<kWarps, G, hd>(sm_m, sm_l, sm_acc, b, partials, counters, out, qo, kv.sinks,
                                     segs.xh, out0);
}

// Query heads per block: the largest of 8, 4, 2, 1 that divides the group and keeps G x EPT
// (the accumulators and q held per lane) within per_lane registers each (16: 8 x 4 spilled).
int heads_per_block(int64_t group, int64_t ept, int64_t per_lane) {
  for (int g : {8, 4, 2, 1})
    if (group % g == 0 && g * ept <= per_lane) return g;
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

}  // namespace

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
                                    const AttnKv& kv, DecodeProbe probe, int64_t n_segs,
                                    DecodeSegments segs) {
  // Eight or more query heads a KV head over a cache of at most 4,096 rows (Qwen3-MoE, gpt-oss at
  // chat lengths): the scalar kernel beats the tensor-core kernel's blocks of eight (H200,
  // hearth-cuda-bench --attention-only --attn-shape 2, us, scalar with blocks of four heads /
  // tensor cores: f16 d512 11.1 / 12.7, d4096 20.2 / 19.4; q8_0 d512 11.7 / 15.6, d4096 20.8 /
  // 24.7); past that the tensor cores win (f16 d8192 29.4 / 21.6, d32768 89.5 / 39.4). Its
  // blocks there hold half the heads they could (G x EPT <= 8): over a short cache a block's
  // time is its own serial work (the q / k norms, the rotation and append, each tile's scores
  // and the merge of its warps), not the bandwidth, so more blocks of fewer heads finish sooner
  // (f16 d64 / d512 / d4096: four heads 9.13 / 11.15 / 20.1 us, two 7.53 / 9.23 / 20.7, one 7.45 /
  // 10.69 / 26.0; q8_0 d512 four 11.7, one 10.5; Qwen3-30B-A3B's shape Q4_K tg64 440 -> 464
  // tok/s, @ d1024 391 -> 412, @ d3072 354 -> 365; session 43).
  // A sliding window bounds the rows a query sees: the grid and the kernel choice go by those.
  if (kv.window > 0 && kv.window < max_ctx) max_ctx = kv.window;
  const bool wide_groups_short_cache = n_segs == 1 && n_heads >= 8 * n_kv_heads && max_ctx <= 4096;
  if (!probe.scalar && !wide_groups_short_cache &&
      attention_decode_mma_supported(head_dim, kv.k, kv.v))
    return launch_attention_decode_mma(q, k_cache, v_cache, out, pos0, pos0_dev, max_ctx, n_heads,
                                       n_kv_heads, head_dim, scale, partials, counters, s, qo, rope,
                                       kv, probe, n_segs, segs);
  const int g =
      heads_per_block(n_heads / n_kv_heads, head_dim / 32, wide_groups_short_cache ? 8 : 16);
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
    static int per_sm = 0;  // per instance
    err = launch_decode_instance(kernel, per_sm, smem, kWarps * 32, n_heads / g, max_ctx, probe, s,
                                 q, kc, vc, rope, partials, counters, out, qo, pos0, pos0_dev,
                                 n_heads, n_kv_heads, scale, kv, n_segs, segs);
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

bool attention_decode_batch_supported(int64_t head_dim, DType cache_type) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) &&
         (cache_type == DType::F16 || cache_type == DType::BF16 || cache_type == DType::Q8_0);
}

int64_t attention_decode_batch_floats(int64_t n_segs, int64_t n_heads, int64_t head_dim,
                                      int64_t max_ctx) {
  // The most splits a launch takes: blocks of 8 query heads (the fewest rows), 16 blocks an SM.
  const int64_t splits = decode_splits((n_heads + 7) / 8 * n_segs, 16, max_ctx);
  return attention_counter_slots(n_segs, n_heads) + n_segs * n_heads * splits * (head_dim + 2);
}

cudaError_t launch_attention_decode_batch(const float* q, const AttnSegment* segs, int64_t n_segs,
                                          float* out, void* xh, int64_t max_ctx, int64_t n_heads,
                                          int64_t n_kv_heads, int64_t head_dim, DType cache_type,
                                          float scale, float* partials, cudaStream_t s,
                                          const AttnKv& mask, const AttnRope& rope) {
  if (n_segs <= 0) return cudaSuccess;
  if (!attention_decode_batch_supported(head_dim, cache_type) || n_segs > 65535 || max_ctx <= 0 ||
      n_kv_heads <= 0 || n_heads % n_kv_heads != 0 ||
      (rope.k && (!rope.v || !rope.inv_freq || !attention_rope_fusable(1, head_dim, rope.style) ||
                  !rope.q_norm != !rope.k_norm)))
    return cudaErrorInvalidValue;
  auto* counters = reinterpret_cast<unsigned*>(partials);
  return launch_attention_decode(
      q, nullptr, nullptr, out, max_ctx - 1, nullptr, max_ctx, n_heads, n_kv_heads, head_dim, scale,
      partials + attention_counter_slots(n_segs, n_heads), counters, s, DecodeQuantOut{}, rope,
      AttnKv{cache_type, cache_type, mask.sinks, mask.window, mask.ring_rows, mask.softcap},
      DecodeProbe{}, n_segs, DecodeSegments{segs, xh});
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
