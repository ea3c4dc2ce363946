// What the fp16 batched matmuls (matmul-batch-half.cu's streamed form, matmul-batch-tma.cu's
// copy-engine form) do with one row's weights for a step of 128 or 256 columns: which bytes a
// lane (g, t) of a warp holds (HalfRows<T>::Row), and how the A halves of each m16n8k16 MMA come
// out of them. Both kernels feed x in launch_batch_x_half's order and give each lane t its own
// 32-element blocks of the step, so an MMA's k slots mix four blocks, each lane scaling its own.
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/quant-device.cuh"

namespace hearth::cuda {

// Weights are read once: not kept in L1.
__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ldg_u16(const uint16_t* p) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
// Nibbles at bits 4..7 and 20..23 of v as the halves 1024 + 16 n (exact).
__device__ __forceinline__ __half2 nibbles_hi(uint32_t v) {
  return h2_bits((v & 0x00F000F0u) | 0x64006400u);
}
// 1024 + 16 n -> n - offset, exactly (one FMA of exact fp16 values with an exact result).
__device__ __forceinline__ __half2 high_nibbles_less(uint32_t v, float offset) {
  return __hfma2(nibbles_hi(v), __float2half2_rn(1.f / 16), __float2half2_rn(-64.f - offset));
}

// The k order. x arrives in launch_batch_x_half's order: of every 4 elements the middle two
// swapped, so the 8 bytes of group i of a 32-element block are elements (4i, 4i+2, 4i+1, 4i+3),
// one MMA's B fragment for one lane (k slots 2t, 2t+1 and 2t+8, 2t+9). A lane (g, t) gives each
// MMA group i of its own block: in the A fragment, rows g and g+8 take elements (4i, 4i+2) in
// registers 0 / 1 and (4i+1, 4i+3) in 2 / 3. So a step's MMA (c, p, s) is, for each lane t,
// group 2p + s of the lane's block c (p: x's 16-byte granule, s: its half).
//
// Q4_0: a lane's block per step: 16 body bytes (element j in the low nibble of byte j, j + 16
// in the high) and its scale. Group i < 4 is the low nibbles of word i, i >= 4 the high nibbles
// of word i - 4.
template <DType T>
struct HalfRows;

template <>
struct HalfRows<DType::Q4_0> {
  static constexpr int kLaneBlocks = 1;  // 32-element blocks a lane owns per step
  struct Row {
    uint4 q;
    uint32_t d;
  };
  struct Ready {
    __half2 d;
  };
  static __device__ void load(Row& r, const DeviceWeight& w, int64_t row, int b0, int t) {
    const int64_t blk = row * w.blocks_per_row + b0 + t;
    r.q = ldg_stream(w.body + blk * 16);
    r.d = ldg_u16(w.aux16 + blk);
  }
  static __device__ Ready prep(const Row& r, int) { return {h2_bits(r.d * 0x10001u)}; }
  static __device__ void frag(const Row& r, const Ready& k, int, int p, int s, uint32_t& lo,
                              uint32_t& hi) {
    const uint32_t v = word_of(r.q, (2 * p + s) & 3);
    if (p < 2) {  // (1024 + n) - 1032 = n - 8 exactly; one rounding, in the multiply
      const __half2 c = __float2half2_rn(1032.f);
      lo = bits_h2(__hmul2(__hsub2(nibbles_h2(v), c), k.d));
      hi = bits_h2(__hmul2(__hsub2(nibbles_h2(v >> 8), c), k.d));
    } else {
      lo = bits_h2(__hmul2(high_nibbles_less(v, 8.f), k.d));
      hi = bits_h2(__hmul2(high_nibbles_less(v >> 8, 8.f), k.d));
    }
  }
};

// Q8_0: 32 body bytes, element j = byte j; group i is word i.
template <>
struct HalfRows<DType::Q8_0> {
  static constexpr int kLaneBlocks = 1;
  struct Row {
    uint4 q0, q1;
    uint32_t d;
  };
  struct Ready {
    __half2 d;
  };
  static __device__ void load(Row& r, const DeviceWeight& w, int64_t row, int b0, int t) {
    const int64_t blk = row * w.blocks_per_row + b0 + t;
    r.q0 = ldg_stream(w.body + blk * 32);
    r.q1 = ldg_stream(w.body + blk * 32 + 16);
    r.d = ldg_u16(w.aux16 + blk);
  }
  static __device__ Ready prep(const Row& r, int) { return {h2_bits(r.d * 0x10001u)}; }
  static __device__ void frag(const Row& r, const Ready& k, int, int p, int s, uint32_t& lo,
                              uint32_t& hi) {
    const int i = 2 * p + s;
    // Bytes b + 128 (the sign bit flipped) under 0x64: the halves 1152 + b, b exactly after the
    // subtraction.
    const uint32_t v = word_of(i < 4 ? r.q0 : r.q1, i & 3) ^ 0x80808080u;
    const __half2 c = __float2half2_rn(1152.f);
    lo = bits_h2(__hmul2(__hsub2(h2_bits(__byte_perm(v, 0x64u, 0x4240)), c), k.d));
    hi = bits_h2(__hmul2(__hsub2(h2_bits(__byte_perm(v, 0x64u, 0x4341)), c), k.d));
  }
};

// Q4_K (packed: 128 quant bytes per 256-element super-block, heads apart): a step is one
// super-block, lane t owns its chunk t of 32 bytes: sub-block 2t in the low nibbles (lane block
// c = 0), 2t + 1 in the high (c = 1); group i of either is word i of the chunk. value = d sc q -
// dmin m.
template <>
struct HalfRows<DType::Q4_K> {
  static constexpr int kLaneBlocks = 2;
  struct Row {
    uint4 q0, q1, head;
  };
  struct Ready {
    __half2 scale[2], neg_min[2];
  };
  static __device__ void load(Row& r, const DeviceWeight& w, int64_t row, int b0, int t) {
    const int64_t sb = row * w.blocks_per_row + (b0 >> 3);
    r.q0 = ldg_stream(w.body + sb * 128 + t * 32);
    r.q1 = ldg_stream(w.body + sb * 128 + t * 32 + 16);
    r.head = ldg_stream(w.aux_head + sb);
  }
  static __device__ Ready prep(const Row& r, int t) {
    Ready k;
    const float d = half_bits(r.head.x), dmin = half_bits(r.head.x >> 16);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float sc, mn;
      k_scale_min(r.head, 2 * t + c, sc, mn);
      k.scale[c] = __float2half2_rn(d * sc);
      k.neg_min[c] = __float2half2_rn(-dmin * mn);
    }
    return k;
  }
  static __device__ void frag(const Row& r, const Ready& k, int c, int p, int s, uint32_t& lo,
                              uint32_t& hi) {
    const int i = 2 * p + s;
    const uint32_t v = word_of(i < 4 ? r.q0 : r.q1, i & 3);
    __half2 a, b;
    if (c == 0) {
      const __half2 k1024 = __float2half2_rn(1024.f);
      a = __hsub2(nibbles_h2(v), k1024);
      b = __hsub2(nibbles_h2(v >> 8), k1024);
    } else {
      a = high_nibbles_less(v, 0.f);
      b = high_nibbles_less(v >> 8, 0.f);
    }
    lo = bits_h2(__hfma2(a, k.scale[c], k.neg_min[c]));
    hi = bits_h2(__hfma2(b, k.scale[c], k.neg_min[c]));
  }
};

// The K splits of one row tile that a cluster's blocks share (the portable cluster size).
constexpr int kMaxTileSplits = 8;
// Shared memory a block's partial sums take when K is split: kTokens rows of kRows floats, +4
// so a lane quad's tokens land in distinct banks.
__host__ __device__ constexpr int tile_sums_bytes(int rows, int tokens) {
  return tokens * (rows + 4) * 4;
}

// A block's sums for its tile (kRows rows from tile_row0, kTokens tokens from tok0; each warp's
// MT x 16 rows from warp_rows, its NT x 8 tokens; warp_rows < 0: a warp that holds none) into
// y [n_tok, d] (and added to add when given). Not split: each lane stores its own. Split over the
// (1, 1, splits) cluster: the sums meet in `part` (tile_sums_bytes() of shared memory no longer in
// use, every thread of the block here) and every block adds up a share of the tile from all of
// them, in rank order. c[0], c[1]: row g, tokens 2t, 2t+1; c[2], c[3]: row g + 8.
template <int MT, int NT, int kRows, int kTokens, int kBlockThreads>
__device__ __forceinline__ void store_tile_sums(const float (&acc)[MT][NT][4], bool live,
                                                int warp_rows, int64_t tile_row0, int tok0,
                                                int64_t d, int n_tok, float* y, float* add,
                                                int splits, float* part) {
  namespace cg = cooperative_groups;
  constexpr int kPartStride = kRows + 4;
  const int tid = int(threadIdx.x), lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t warp_row0 = tile_row0 + warp_rows;
  if (splits == 1) {
    if (!live) return;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t row = warp_row0 + mt * 16 + (i >> 1) * 8 + g;
          const int tok = tok0 + nt * 8 + 2 * t + (i & 1);
          if (row >= d || tok >= n_tok) continue;
          y[tok * d + row] = acc[mt][nt][i];
          if (add) add[tok * d + row] += acc[mt][nt][i];
        }
    return;
  }
  if (warp_rows >= 0)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          part[(nt * 8 + 2 * t + (i & 1)) * kPartStride + warp_rows + mt * 16 + (i >> 1) * 8 + g] =
              acc[mt][nt][i];
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  // Four rows a thread: one 16-byte read from each block of the cluster, all in flight at once.
  const int rank = int(cluster.block_rank());
  constexpr int kQuads = kTokens * kRows / 4;
#pragma unroll 2
  for (int e = rank * kBlockThreads + tid; e < kQuads; e += splits * kBlockThreads) {
    const int tl = e / (kRows / 4), r = e % (kRows / 4) * 4;
    float4 parts[kMaxTileSplits];
#pragma unroll
    for (int q = 0; q < kMaxTileSplits; ++q)
      if (q < splits)
        parts[q] = *reinterpret_cast<const float4*>(cluster.map_shared_rank(part, q) +
                                                    tl * kPartStride + r);
    float4 v = parts[0];
#pragma unroll
    for (int q = 1; q < kMaxTileSplits; ++q)
      if (q < splits) v.x += parts[q].x, v.y += parts[q].y, v.z += parts[q].z, v.w += parts[q].w;
    const int tok = tok0 + tl;
    const int64_t row = tile_row0 + r;
    if (tok >= n_tok) continue;
    float* yr = y + tok * d + row;
    if (row + 3 < d && d % 4 == 0) {
      *reinterpret_cast<float4*>(yr) = v;
      if (add) {
        float4* a = reinterpret_cast<float4*>(add + tok * d + row);
        const float4 o = *a;
        *a = make_float4(o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w);
      }
    } else {
      const float vs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (row + i < d) {
          yr[i] = vs[i];
          if (add) add[tok * d + row + i] += vs[i];
        }
    }
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
}

// Host side of both split-K kernels. How many blocks of `fn` an SM holds (its dynamic shared
// memory limit raised to smem first) and whether clusters of kMaxTileSplits of them fit; asked
// once per kernel.
struct SplitFit {
  int blocks_per_sm = 0;
  bool clusters = false;
};
template <class... P>
SplitFit split_fit(void (*fn)(P...), int threads, int smem) {
  SplitFit f;
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f.blocks_per_sm, fn, threads, size_t(smem)) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1, 1, kMaxTileSplits);
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = size_t(smem);
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 1, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = kMaxTileSplits;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  f.clusters = cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg) == cudaSuccess && clusters > 0;
  (void)cudaGetLastError();
  return f;
}

}  // namespace hearth::cuda
