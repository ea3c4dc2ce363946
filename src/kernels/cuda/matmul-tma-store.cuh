// The copy-engine form of the batched decode matmul (matmul-batch-tma.cu): its block's shape
// and the epilogues of its fused forms, the gated FFN half and the first matmul of a folded
// RMSNorm (decode-batch.h FoldedNorm). Apart from the kernel so each stays one thing to read.
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/decode-batch.h"
#include "kernels/cuda/folded-norm.cuh"
#include "kernels/cuda/half-mma.cuh"

namespace hearth::cuda::tma_form {

constexpr int kMT = 2;  // 16-row MMA tiles a warp
constexpr int kWarpRows = kMT * 16;
constexpr int kMmaWarps = 4;
constexpr int kThreads = (kMmaWarps + 1) * 32;  // + the copy warp
constexpr int kRows = kMmaWarps * kWarpRows;    // a block's row tile: one box of W
constexpr int kTokens = 32;                     // a block's token group: 4 MMA tiles of 8
constexpr int kNT = kTokens / 8;
constexpr int kStages = 2;       // the ring: 2 x ~34 KB, three blocks an SM (12 MMA warps)
constexpr int kStageCols = 256;  // a stage: one box of scales (16 bytes a row)
constexpr int kLine = 128;       // x's boxes: 64 halves a line, swizzled

// The gated form's row tile: kPairRows rows of W_gate over the same rows of W_up.
constexpr int kPairRows = kRows / 2;

// The plain product's epilogue tag; the gated form takes gate-act.cuh's functors.
struct NoGate {};

// A warp's sums into the ring for a split or fused epilogue: a token's line of kRows + 4 floats
// (+4: a lane quad's tokens in distinct banks), tile mt's rows from row0 + mt * mt_rows.
__device__ __forceinline__ void stage_sums(const float (&acc)[kMT][kNT][4], float* part, int row0,
                                           int mt_rows) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        part[(nt * 8 + 2 * t + (i & 1)) * (kRows + 4) + row0 + mt * mt_rows + (i >> 1) * 8 + g] =
            acc[mt][nt][i];
}

// The gated form's epilogue. Warp w's tile 0 holds W_gate's rows w*16.. of the block's 64 and
// its tile 1 W_up's same rows, so without K splits a lane has both sums of its outputs; with
// them, every MMA warp's sums go through the ring (a token's line: W_gate's rows at 0..63, W_up's
// at 64..127) and the cluster's blocks each take a share of the (token, 4 rows), adding the
// splits' parts in rank order: store_tile_sums' order, so the sums are the plain form's bits.
template <class Gate>
__device__ __forceinline__ void store_gated(const float (&acc)[kMT][kNT][4], bool live, int warp,
                                            int64_t row0, int tok0, int64_t d, int n_tok,
                                            float* out, __half* xh, int splits, float* part) {
  static_assert(kMT == 2, "a warp's two row tiles are its W_gate and W_up rows");
  namespace cg = cooperative_groups;
  constexpr int kStride = kRows + 4;
  const int tid = int(threadIdx.x), lane = tid & 31, g = lane >> 2, t = lane & 3;
  const Gate act;
  if (splits == 1) {
    if (!live) return;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = row0 + warp * 16 + (i >> 1) * 8 + g;
        const int tok = tok0 + nt * 8 + 2 * t + (i & 1);
        if (row >= d || tok >= n_tok) continue;
        const float v = act(acc[0][nt][i], acc[1][nt][i]);
        out[tok * d + row] = v;
        xh[tok * d + batch_half_index(row)] = __float2half_rn(v);
      }
    return;
  }
  if (warp >= 0) stage_sums(acc, part, warp * 16, kPairRows);
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = int(cluster.block_rank());
  constexpr int kQuads = kTokens * kPairRows / 4;
  for (int e = rank * kThreads + tid; e < kQuads; e += splits * kThreads) {
    const int tl = e / (kPairRows / 4), r = e % (kPairRows / 4) * 4;
    float4 gs = make_float4(0.f, 0.f, 0.f, 0.f), us = gs;
    for (int q = 0; q < splits; ++q) {
      const float* pq = cluster.map_shared_rank(part, q) + tl * kStride + r;
      const float4 a = *reinterpret_cast<const float4*>(pq);
      const float4 b = *reinterpret_cast<const float4*>(pq + kPairRows);
      if (q == 0) {
        gs = a, us = b;
      } else {
        gs.x += a.x, gs.y += a.y, gs.z += a.z, gs.w += a.w;
        us.x += b.x, us.y += b.y, us.z += b.z, us.w += b.w;
      }
    }
    const int tok = tok0 + tl;
    const int64_t row = row0 + r;
    if (tok >= n_tok || row >= d) continue;  // (d % 4 == 0: a quad is whole or absent)
    const float4 v =
        make_float4(act(gs.x, us.x), act(gs.y, us.y), act(gs.z, us.z), act(gs.w, us.w));
    *reinterpret_cast<float4*>(out + tok * d + row) = v;
    // (batch_half_index: a quad's fp16 as v0 v2 v1 v3)
    const __half2 lo = __floats2half2_rn(v.x, v.z), hi = __floats2half2_rn(v.y, v.w);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(xh + tok * d + row) = packed;
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

// The first matmul of a folded RMSNorm (FoldedNorm::next_xh set; its one job adds to the
// residual): store_tile_sums' split form, taken with or without K splits (the sums meet in the
// ring in rank order, the same bits), then per (token, 4 rows) the residual, next_xh and the sum
// of squares, which a warp (its 32 quads: one token's 128 rows) adds up for its tile.
__device__ __forceinline__ void store_norm_sums(const float (&acc)[kMT][kNT][4], int warp_rows,
                                                int tile, int64_t row0, int tok0, int64_t d,
                                                int n_tok, float* y, float* add,
                                                const FoldedNorm& nm, int splits, float* part) {
  namespace cg = cooperative_groups;
  constexpr int kStride = kRows + 4;
  static_assert(kRows / 4 == 32, "a warp's quads are one token's rows");
  const int tid = int(threadIdx.x), lane = tid & 31;
  if (warp_rows >= 0) stage_sums(acc, part, warp_rows, 16);
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = int(cluster.block_rank());
  const int tiles = int((d + kRows - 1) / kRows);
  constexpr int kQuads = kTokens * kRows / 4;
  for (int e = rank * kThreads + tid; e < kQuads; e += splits * kThreads) {
    const int tl = e / (kRows / 4), r = e % (kRows / 4) * 4;
    float4 v =
        *reinterpret_cast<const float4*>(cluster.map_shared_rank(part, 0) + tl * kStride + r);
    for (int q = 1; q < splits; ++q) {
      const float4 o =
          *reinterpret_cast<const float4*>(cluster.map_shared_rank(part, q) + tl * kStride + r);
      v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
    }
    const int tok = tok0 + tl;
    const int64_t row = row0 + r;
    // (d % 4 == 0: a quad is whole or absent)
    float ss = tok < n_tok && row < d ? store_norm_quad(v, tok, row, d, y, add, nm) : 0.f;
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0 && tok < n_tok) nm.ss[int64_t(tok) * tiles + tile] = ss;
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

}  // namespace hearth::cuda::tma_form
