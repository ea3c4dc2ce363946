// Single-token decode attention on the tensor cores (f16 and q8_0 caches, head_dim 64 or 128,
// up to 8 query heads a KV head in one block). The scalar decode kernel (attention-decode.cu)
// spent ~110 (f16) to ~135 (q8_0) warp instructions a cached row on widening, per-row dot
// products and butterflies, and ran issue-bound below the bandwidth (ncu at d8192: 57-63% of
// issue slots busy, q8_0 at 1.4 TB/s). Here a warp takes 16 rows at a time as MMAs:
//   S = q K^T   A = the block's query heads (rows g: fp16 hi part, rows 8 + g: the lo part, so
//               S = hi + lo carries ~22 bits of q), B = 8 rows of K per n-tile;
//   O += P V    A = the softmax weights (rows g: hi, 8 + g: lo), B = V's 16 rows.
// K and V stay as the cache holds them: f16 rows go through ldmatrix (16-byte chunks swizzled
// by row so the eight rows of a matrix hit distinct banks); q8_0 rows give their int8 quants as
// exact halves (the 0x64 exponent trick) with each 32-dim block's scale applied to the scores
// (K) or folded into the weights (V), so both forms are exact up to fp32 accumulation order.
// The grid, the tile dealing, the fused rope / append and the split combine are the scalar
// kernel's (attention-decode-block.cuh); the row the step appends is attended from shared
// memory after the tiles, by the block that owns the last tile.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention-decode-block.cuh"
#include "kernels/cuda/attention-decode.cuh"
#include "kernels/cuda/cp-async.cuh"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope-pair.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16;           // cached rows a warp takes per tile (one PV k-step)
constexpr int kT = kWarps * kRows;  // rows per tile

// A cached row of form F and head size HD: its bytes in the cache, its stride in shared memory
// (q8_0 rows padded so the 8 rows of a fragment load start in distinct banks) and the cp.async
// granule that tiles it.
template <KvForm F, int HD>
struct RowShape {
  static constexpr bool kQ8 = F == KvForm::kQ8_0;
  static constexpr int kBytes = kQ8 ? HD / 32 * kQ8Bytes : HD * 2;
  static constexpr int kStride = kQ8 ? (HD == 128 ? 144 : 80) : HD * 2;
  static constexpr int kGran = kQ8 ? (kBytes % 8 == 0 ? 8 : 4) : 16;
  static constexpr int kGrans = kBytes / kGran;
  static constexpr int kStageBytes = 2 * kT * kStride;  // K rows, then V rows
  // Tiles in flight per block, and blocks an SM: f16 rows are bandwidth-bound at 2 blocks of
  // 3 stages (3.7 TB/s at d8192); q8_0 ones run out of eligible warps at 3 blocks (12 warps), so
  // 2 stages and 4 blocks (at most 128 registers).
  static constexpr int kStages = kQ8 ? 2 : 3;
  static constexpr int kMinBlocks = kQ8 ? 4 : 2;
};

// Byte offset in a stage row of f16 chunk c (8 halves) of row r: chunks XOR-swizzled by r % 8.
__device__ __forceinline__ int f16_chunk(int r, int c) {
  return (c ^ (r & 7)) << 4;
}

// Four int8 quants (a word, in memory order) as two exact half2: (w0, w1), (w2, w3).
__device__ __forceinline__ void q8_halves(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const __half2 c = __float2half2_rn(1152.f);  // 0x64 over b + 128: 1152 + b
  w ^= 0x80808080u;
  lo = bits_h2(__hsub2(h2_bits(__byte_perm(w, 0x64u, 0x4140)), c));
  hi = bits_h2(__hsub2(h2_bits(__byte_perm(w, 0x64u, 0x4342)), c));
}

// The 4 quant bytes at q (2-byte aligned: block b's quants start 2 bytes into its 34).
template <bool kAligned4>
__device__ __forceinline__ uint32_t q8_word(const uint8_t* q) {
  if constexpr (kAligned4) return *reinterpret_cast<const uint32_t*>(q);
  const auto* h = reinterpret_cast<const unsigned short*>(q);
  return uint32_t(h[0]) | (uint32_t(h[1]) << 16);
}

__device__ __forceinline__ float q8_scale(const uint8_t* block) {
  return __half2float(*reinterpret_cast<const __half*>(block));
}

// Block (brow = KV head x G query heads, split); 4 warps, each 16 rows of a 64-row tile.
template <int HD, KvForm F, int G>
__global__ void __launch_bounds__(kWarps * 32, (RowShape<F, HD>::kMinBlocks))
    attn_decode_mma_kernel(const float* __restrict__ q, uint8_t* kc, uint8_t* vc, AttnRope rope,
                           float* __restrict__ partials, unsigned* __restrict__ counters,
                           float* __restrict__ out, DecodeQuantOut qo, int64_t pos0_host,
                           const int32_t* pos0_dev, int n_heads, int n_kv_heads, float scale,
                           AttnKv kv, bool runs, DecodeSegments segs) {
  using R = RowShape<F, HD>;
  constexpr int kStages = R::kStages;
  constexpr int kKs = HD / 16;  // k-steps of S
  constexpr int kNt = HD / 8;   // n-tiles of O
  static_assert(G <= 8, "query heads fill rows 0..7 (hi) and 8..15 (lo)");
  static_assert(kWarps * G * (HD + 2) * 4 <= kStages * R::kStageBytes, "merge fits the stages");
  extern __shared__ float4 dyn4[];
  auto* stage_mem = reinterpret_cast<uint8_t*>(dyn4);
  __shared__ __align__(16) float sm_qraw[G][HD];
  __shared__ __align__(16) float sm_kraw[HD];
  __shared__ float sm_q[G][HD], sm_kcur[HD], sm_vcur[HD];
  __shared__ float2 sm_cs[HD / 2];
  __shared__ float sm_scur[G];

  // A step of many sequences lets the kernel after it (the O projection's matmul) launch only
  // from its blocks' ends: launched at once, that kernel's blocks sat beside these waiting and
  // the lockstep steps ran 5-9% slower than with the chunked kernel (session 40).
  if (!segs.segs) pdl_trigger();
  // As the scalar kernel: with the append fused, no row read here was written by this step's
  // kernels before it, so the first tiles go out before the wait.
  const bool fused = rope.k != nullptr;
  // A step of many sequences reads its descriptors first: the kernel before (the table's
  // upload, a kernel in the same PDL chain) writes them.
  if (!fused || segs.segs) pdl_wait();
  const int64_t out0 = take_segment(segs, n_heads, n_kv_heads, HD, q, kc, vc, pos0_dev, out,
                                    partials, counters, rope);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;  // MMA fragment row (query head) and column pair
  const DecodeTiles b = decode_tiles<G>(kT, n_heads, n_kv_heads, pos0_host, pos0_dev, runs, kv);
  if (!b.live()) return;
  const int kvh = b.kvh, h0 = b.h0, n_mine = b.n_mine;
  const int64_t pcur = b.pcur;
  // Visible rows read from the cache: with the append fused, row pcur (the last visible one) is
  // attended from shared memory.
  const int64_t n_cached = fused ? b.n_ctx - 1 : b.n_ctx;
  const bool owns_last = b.owns_last();
  const int64_t kv_stride = int64_t(n_kv_heads) * R::kBytes;
  const uint8_t* kbase = kc + int64_t(kvh) * R::kBytes;
  const uint8_t* vbase = vc + int64_t(kvh) * R::kBytes;

  // Tile k into stage k % kStages; rows at or past n_cached are zeros (they score -inf and
  // must weigh nothing: a zero row, not whatever bytes the cache holds there).
  // A thread copies granule column c_mine of rows r_mine, r_mine + kPass, ... (the same
  // swizzle on every one of them: kPass is a multiple of 8 for f16 rows); tile rows are visible
  // indices, each copied from its cache row (b.row: a ring's wrap).
  constexpr int kPass = kWarps * 32 / R::kGrans;  // rows per pass of the block
  const int c_mine = threadIdx.x % R::kGrans, r_mine = threadIdx.x / R::kGrans;
  const int dst_mine =
      r_mine * R::kStride + (R::kQ8 ? c_mine * R::kGran : f16_chunk(r_mine, c_mine));
  // The copy loop's cache addresses step by a pass's rows (one 64-bit add a row and cache, not
  // a multiply): a full tile that does not cross a ring's wrap (nearly every tile) takes the
  // loop with no per-row tests; the rest (a split's partial last tile, a wrap) the general one.
  constexpr int kIters = (kT + kPass - 1) / kPass;
  const int64_t pass_step = int64_t(kPass) * kv_stride;
  const int64_t ring_step = int64_t(b.ring) * kv_stride;
  const int64_t mine_off = int64_t(r_mine) * kv_stride + c_mine * R::kGran;
  // A V row sits at a fixed distance from its K row (both caches share the row layout), so one
  // stepped address serves both: the distance is taken as integers, the caches being separate
  // allocations in the device's flat address space.
  const int64_t v_off =
      int64_t(reinterpret_cast<uintptr_t>(vbase)) - int64_t(reinterpret_cast<uintptr_t>(kbase));
  auto issue = [&](int k) {
    if (r_mine >= kPass) return;
    const int64_t p0 = b.pos(k, kT);
    const int64_t left = n_cached - p0;
    const int rows = left < 0 ? 0 : left < kT ? int(left) : kT;
    uint8_t* sk = stage_mem + (k % kStages) * R::kStageBytes + dst_mine;
    uint8_t* sv = sk + kT * R::kStride;
    const int wrap = b.wrap_at(p0);
    const uint8_t* g = kbase + b.row(p0) * kv_stride + mine_off;
    if (rows == kT && wrap >= kT) {
#pragma unroll
      for (int i = 0; i < kIters; ++i, g += pass_step) {
        if (i == kIters - 1 && r_mine + i * kPass >= kT) break;
        const int o = i * kPass * R::kStride;
        cp_async(sk + o, g, R::kGran);
        cp_async(sv + o, g + v_off, R::kGran);
      }
      return;
    }
#pragma unroll
    for (int r = r_mine, i = 0; i < kIters; ++i, r += kPass, g += pass_step) {
      if (r >= kT) break;
      const int o = i * kPass * R::kStride;
      if (r < rows) {
        const uint8_t* gr = r >= wrap ? g - ring_step : g;
        cp_async(sk + o, gr, R::kGran);
        cp_async(sv + o, gr + v_off, R::kGran);
      } else if constexpr (R::kGran == 16) {
        *reinterpret_cast<uint4*>(sk + o) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(sv + o) = make_uint4(0, 0, 0, 0);
      } else if constexpr (R::kGran == 8) {
        *reinterpret_cast<uint2*>(sk + o) = make_uint2(0, 0);
        *reinterpret_cast<uint2*>(sv + o) = make_uint2(0, 0);
      } else {
        *reinterpret_cast<uint32_t*>(sk + o) = 0u;
        *reinterpret_cast<uint32_t*>(sv + o) = 0u;
      }
    }
  };
  issue_first_tiles<kStages>(n_mine, issue);
  if (fused) rope_angles_then_wait<HD>(rope, pcur, sm_cs);

  load_q_kv<G, HD, kWarps>(q, rope, h0, kvh, sm_qraw, sm_kraw, sm_vcur);
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
    const int gg = i / HD, d = i % HD;
    (&sm_q[0][0])[i] =
        (fused ? rope_elem(sm_qraw[gg], sm_cs, rope.style, HD, d) : sm_qraw[gg][d]) * scale;
  }
  if (fused)
    rotate_append_kv<HD, F>(rope, sm_kraw, sm_cs, sm_kcur, sm_vcur, b.appends(), kc, vc,
                            b.cur_row(), n_kv_heads, kvh);
  __syncthreads();

  // q's A fragments, k-step s: head g's dims (hi in a0 / a2, lo in a1 / a3). f16 rows: k 2t,
  // 2t + 1 are dims 16 s + 2t (+1), k 2t + 8 (+9) dims 16 s + 8 + 2t (+1), as ldmatrix gives K.
  // q8_0 rows: k 2t (+1) are dims 16 s + 4t (+1) and k 2t + 8 (+9) dims 16 s + 4t + 2 (+3), so
  // a lane's B fragment is 4 adjacent quant bytes (the dot product does not care about order).
  uint32_t qa[kKs][4];
#pragma unroll
  for (int s = 0; s < kKs; ++s) {
    const int d0 = R::kQ8 ? 16 * s + 4 * t : 16 * s + 2 * t;
    const int d1 = R::kQ8 ? d0 + 2 : d0 + 8;
    if (g < G) {
      split_half2(sm_q[g][d0], sm_q[g][d0 + 1], qa[s][0], qa[s][1]);
      split_half2(sm_q[g][d1], sm_q[g][d1 + 1], qa[s][2], qa[s][3]);
    } else {
      qa[s][0] = qa[s][1] = qa[s][2] = qa[s][3] = 0u;
    }
  }

  const float two_over_cap = kv.softcap > 0.f ? 2.f / kv.softcap : 0.f;
  // The appended row's scores (fused, blocks owning the last tile), while the tiles land.
  if (fused && owns_last)
    for (int gg = warp; gg < G; gg += kWarps) {
      float part = 0.f;
      for (int d = lane; d < HD; d += 32) part = fmaf(sm_q[gg][d], sm_kcur[d], part);
      part = warp_sum(part);
      if (lane == 0)
        sm_scur[gg] = kv.softcap > 0.f ? capped_score(part, kv.softcap, two_over_cap) : part;
    }

  // Online softmax state of head g (rows g / 8 + g of the accumulators: hi and lo weights).
  float m = -INFINITY, l = 0.f;
  float acc[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  for (int k = 0; k < n_mine; ++k) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile k landed for every thread; stage (k - 1) % kStages is free
    if (k + kStages - 1 < n_mine) issue(k + kStages - 1);
    cp_async_commit();
    const int64_t p0 = b.pos(k, kT) + warp * kRows;
    const int64_t left = n_cached - p0;
    if (left <= 0) continue;  // warp-uniform: nothing cached in this warp's rows
    const uint8_t* sk = stage_mem + (k % kStages) * R::kStageBytes + warp * kRows * R::kStride;
    const uint8_t* sv = sk + kT * R::kStride;

    // Scores of positions 8j + 2t (+1) of the warp's 16, for head g.
    float sc[2][2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if constexpr (!R::kQ8) {
        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < kKs / 2; ++kk) {
          const int r = 8 * j + (lane & 7);
          uint32_t b[4];
          ldsm_x4(b, sk + r * R::kStride + f16_chunk(r, 4 * kk + (lane >> 3)));
          mma_f16(qa[2 * kk][0], qa[2 * kk][1], qa[2 * kk][2], qa[2 * kk][3], b[0], b[1], c);
          mma_f16(qa[2 * kk + 1][0], qa[2 * kk + 1][1], qa[2 * kk + 1][2], qa[2 * kk + 1][3], b[2],
                  b[3], c);
        }
        sc[j][0] = c[0] + c[2];
        sc[j][1] = c[1] + c[3];
      } else {
        sc[j][0] = sc[j][1] = 0.f;
        const uint8_t* kb = sk + (8 * j + g) * R::kStride + 2 + 4 * t;  // B: position 8j + g
        const uint8_t* ks0 = sk + (8 * j + 2 * t) * R::kStride;         // C: 8j + 2t (+1)
#pragma unroll
        for (int b = 0; b < HD / 32; ++b) {
          float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t b0, b1;
            const uint8_t* p = kb + b * kQ8Bytes + 16 * h;
            q8_halves((b & 1) ? q8_word<true>(p) : q8_word<false>(p), b0, b1);
            const int s = 2 * b + h;
            mma_f16(qa[s][0], qa[s][1], qa[s][2], qa[s][3], b0, b1, c);
          }
          sc[j][0] = fmaf(q8_scale(ks0 + b * kQ8Bytes), c[0] + c[2], sc[j][0]);
          sc[j][1] = fmaf(q8_scale(ks0 + R::kStride + b * kQ8Bytes), c[1] + c[3], sc[j][1]);
        }
      }
    }
    if (kv.softcap > 0.f)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) sc[j][e] = capped_score(sc[j][e], kv.softcap, two_over_cap);
    if (left < kRows) {
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * j + 2 * t + e >= left) sc[j][e] = -INFINITY;
    }
    float mx = fmaxf(fmaxf(sc[0][0], sc[0][1]), fmaxf(sc[1][0], sc[1][1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);  // finite: the warp's first row is cached
    const float corr = exp_diff(m, m_new);
    if (__any_sync(0xffffffffu, corr != 1.f)) {
#pragma unroll
      for (int n = 0; n < kNt; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] *= corr;
      l *= corr;
    }
    m = m_new;
    float p[2][2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        p[j][e] = __expf(sc[j][e] - m);
        l += p[j][e];
      }

    if constexpr (!R::kQ8) {
      uint32_t a[4];
      split_half2(p[0][0], p[0][1], a[0], a[1]);
      split_half2(p[1][0], p[1][1], a[2], a[3]);
#pragma unroll
      for (int jj = 0; jj < kNt / 2; ++jj) {
        const int r = (lane & 7) + 8 * ((lane >> 3) & 1);
        uint32_t b[4];
        ldsm_x4_trans(b, sv + r * R::kStride + f16_chunk(r, 2 * jj + (lane >> 4)));
        mma_f16(a[0], a[1], a[2], a[3], b[0], b[1], acc[2 * jj]);
        mma_f16(a[0], a[1], a[2], a[3], b[2], b[3], acc[2 * jj + 1]);
      }
    } else {
      // V's scales fold into the weights per 32-dim block: A = p d_v(position, block). B of
      // n-tile 4b + nn, column n, is dim 32b + 4n + nn, so a lane's four n-tiles of a block
      // come from one word (dims 4g..4g + 3) of each of its rows 2t, 2t + 1, 2t + 8, 2t + 9.
      const uint8_t* v0 = sv + (2 * t) * R::kStride;
#pragma unroll
      for (int b = 0; b < HD / 32; ++b) {
        const uint8_t* vb = v0 + b * kQ8Bytes;
        uint32_t a[4];
        split_half2(p[0][0] * q8_scale(vb), p[0][1] * q8_scale(vb + R::kStride), a[0], a[1]);
        split_half2(p[1][0] * q8_scale(vb + 8 * R::kStride),
                    p[1][1] * q8_scale(vb + 9 * R::kStride), a[2], a[3]);
        const uint8_t* x = vb + 2 + 4 * g;
        uint32_t w[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const uint8_t* xr = x + (r < 2 ? r : r + 6) * R::kStride;
          w[r] = (b & 1) ? q8_word<true>(xr) : q8_word<false>(xr);
        }
        uint32_t b0[4], b1[4];  // per nn: positions (2t, 2t + 1) and (2t + 8, 2t + 9)
        q8_halves(__byte_perm(w[0], w[1], 0x5140), b0[0], b0[1]);
        q8_halves(__byte_perm(w[0], w[1], 0x7362), b0[2], b0[3]);
        q8_halves(__byte_perm(w[2], w[3], 0x5140), b1[0], b1[1]);
        q8_halves(__byte_perm(w[2], w[3], 0x7362), b1[2], b1[3]);
#pragma unroll
        for (int nn = 0; nn < 4; ++nn)
          mma_f16(a[0], a[1], a[2], a[3], b0[nn], b1[nn], acc[4 * b + nn]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every stage consumed: reuse the stage memory for the warps' states

  // Dim of accumulator column e (0, 1) of n-tile n for this lane (q8_0: the permuted n order).
  auto out_dim = [&](int n, int e) {
    return R::kQ8 ? 32 * (n >> 2) + 8 * t + 4 * e + (n & 3) : 8 * n + 2 * t + e;
  };

  // The appended row (fused), attended by warp 0 of the blocks owning the last tile (its
  // scores, sm_scur, were made before the tiles).
  if (fused && owns_last && warp == 0) {
    if (g < G) {
      const float s = sm_scur[g];
      const float m_new = fmaxf(m, s);
      const float corr = exp_diff(m, m_new);
      const float pc = __expf(s - m_new);
      l = l * corr + (t == 0 ? pc : 0.f);
#pragma unroll
      for (int n = 0; n < kNt; ++n) {
        acc[n][0] = fmaf(pc, sm_vcur[out_dim(n, 0)], acc[n][0] * corr);
        acc[n][1] = fmaf(pc, sm_vcur[out_dim(n, 1)], acc[n][1] * corr);
        acc[n][2] *= corr;
        acc[n][3] *= corr;
      }
      m = m_new;
    }
  }

  // Warp states to shared memory (head g: hi + lo rows), then the block's end.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  auto* sm_m = reinterpret_cast<float*>(stage_mem);  // [kWarps][G]
  float* sm_l = sm_m + kWarps * G;
  float* sm_acc = sm_l + kWarps * G;  // [kWarps][G][HD]
  if (g < G) {
    if (t == 0) sm_m[warp * G + g] = m, sm_l[warp * G + g] = l;
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
      float* dst = sm_acc + (warp * G + g) * HD;
      dst[out_dim(n, 0)] = acc[n][0] + acc[n][2];
      dst[out_dim(n, 1)] = acc[n][1] + acc[n][3];
    }
  }
  __syncthreads();
  if (segs.segs) pdl_trigger();
  finish_decode_block<kWarps, G, HD>(sm_m, sm_l, sm_acc, b, partials, counters, out, qo, kv.sinks,
                                     segs.xh, out0);
}

template <class Fn>
void dispatch_heads(int g, Fn&& fn) {
  switch (g) {
    case 8:
      return fn(std::integral_constant<int, 8>{});
    case 7:
      return fn(std::integral_constant<int, 7>{});
    case 6:
      return fn(std::integral_constant<int, 6>{});
    case 5:
      return fn(std::integral_constant<int, 5>{});
    case 4:
      return fn(std::integral_constant<int, 4>{});
    case 3:
      return fn(std::integral_constant<int, 3>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    default:
      return fn(std::integral_constant<int, 1>{});
  }
}

// Query heads per block: the largest divisor of the group up to 8 (A's rows hold 8 heads).
int attention_decode_mma_heads(int64_t group) {
  for (int g = 8; g > 1; --g)
    if (group % g == 0) return g;
  return 1;
}

}  // namespace

bool attention_decode_mma_supported(int64_t head_dim, DType k, DType v) {
  return (head_dim == 64 || head_dim == 128) && k == v && (k == DType::F16 || k == DType::Q8_0);
}

cudaError_t launch_attention_decode_mma(const float* q, void* k_cache, void* v_cache, float* out,
                                        int64_t pos0, const int32_t* pos0_dev, int64_t max_ctx,
                                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                        float scale, float* partials, unsigned* counters,
                                        cudaStream_t s, DecodeQuantOut qo, const AttnRope& rope,
                                        const AttnKv& kv, DecodeProbe probe, int64_t n_segs,
                                        DecodeSegments segs) {
  const int g = attention_decode_mma_heads(n_heads / n_kv_heads);
  auto* kc = static_cast<uint8_t*>(k_cache);
  auto* vc = static_cast<uint8_t*>(v_cache);
  cudaError_t err = cudaSuccess;
  auto go = [&](auto hd, auto form, auto gc) {
    constexpr int HD = decltype(hd)::value;
    constexpr KvForm F = decltype(form)::value;
    auto* kernel = attn_decode_mma_kernel<HD, F, decltype(gc)::value>;
    const size_t smem = size_t(RowShape<F, HD>::kStages) * RowShape<F, HD>::kStageBytes;
    static int per_sm = 0;  // per instance
    err = launch_decode_instance(kernel, per_sm, smem, kWarps * 32, n_heads / g, max_ctx, probe, s,
                                 q, kc, vc, rope, partials, counters, out, qo, pos0, pos0_dev,
                                 n_heads, n_kv_heads, scale, kv, n_segs, segs);
  };
  dispatch_heads(g, [&](auto gc) {
    auto by_form = [&](auto hd) {
      if (kv.k == DType::F16)
        go(hd, std::integral_constant<KvForm, KvForm::kF16>{}, gc);
      else
        go(hd, std::integral_constant<KvForm, KvForm::kQ8_0>{}, gc);
    };
    if (head_dim == 64)
      by_form(std::integral_constant<int, 64>{});
    else
      by_form(std::integral_constant<int, 128>{});
  });
  return err;
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
