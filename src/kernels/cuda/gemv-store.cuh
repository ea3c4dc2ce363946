// The decode GEMVs' shared frame (gemv-int8.cu and matmul.cu): which rows of which job a warp
// takes, and the row stores: warp-reduced sums written to y, with the fused residual add, for one
// warp per row group or for kSplit warps sharing one.
#pragma once

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

// A warp's share of a GemvBatch launch. Up to three matrices that read the same x (Q/K/V,
// gate/up) take consecutive block ranges of one launch; the block's range picks the job. The
// warps of a block form row groups of kSplit warps (warp = group * kSplit + part), each group
// kRows rows from row0, which it returns; w, y and add are the job's.
template <int kWarps, int kRows, int kSplit>
__device__ __forceinline__ int64_t gemv_warp_job(const GemvBatch& batch, int warp, DeviceWeight& w,
                                                 float*& y, float*& add) {
  const int j = blockIdx.x < batch.block_end[0] ? 0 : blockIdx.x < batch.block_end[1] ? 1 : 2;
  w = j == 0 ? batch.jobs[0].w : j == 1 ? batch.jobs[1].w : batch.jobs[2].w;
  y = j == 0 ? batch.jobs[0].y : j == 1 ? batch.jobs[1].y : batch.jobs[2].y;
  add = j == 0 ? batch.jobs[0].add_to : j == 1 ? batch.jobs[1].add_to : batch.jobs[2].add_to;
  const unsigned block = blockIdx.x - (j == 0 ? 0u : batch.block_end[j - 1]);
  const int group = warp / kSplit;
  return (int64_t(block) * (kWarps / kSplit) + group) * kRows;
}

// The row indices a warp reads: rows past d repeat the last row (read, never stored), so the
// loads need no bounds checks.
template <int kRows>
__device__ __forceinline__ void gemv_read_rows(int64_t row0, int64_t d, int64_t (&rows)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] = row0 + r < d ? row0 + r : d - 1;
}

// acc[r][t]: lane partial sums of row row0 + r for token t. Lane 0 stores each warp-summed row
// (and adds it into the residual `add` when given: same lane, no race).
template <int kRows, int NT>
__device__ __forceinline__ void store_gemv_rows(const float (&acc)[kRows][NT], int lane,
                                                int64_t row0, int64_t d, float* __restrict__ y,
                                                float* add) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && row0 + r < d) {
        y[t * d + row0 + r] = v;
        if (add) add[t * d + row0 + r] += v;
      }
    }
}

// kSplit > 1: the kSplit warps of a row group each summed every kSplit-th step of the same rows
// (warp = group * kSplit + part). Each leaves its warp sums in shared memory; the group's first
// warp adds them in part order and stores. Every warp of the block must call it (a barrier).
template <int kSplit, int kWarps, int kRows, int NT>
__device__ __forceinline__ void store_gemv_rows_split(const float (&acc)[kRows][NT], int warp,
                                                      int lane, int64_t row0, int64_t d,
                                                      float* __restrict__ y, float* add) {
  if constexpr (kSplit == 1) {
    store_gemv_rows<kRows, NT>(acc, lane, row0, d, y, add);
  } else {
    __shared__ float part[kWarps][kRows][NT];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[r][t]);
        if (lane == 0) part[warp][r][t] = v;
      }
    __syncthreads();
    if (warp % kSplit != 0 || lane != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float v = part[warp][r][t];
#pragma unroll
        for (int k = 1; k < kSplit; ++k) v += part[warp + k][r][t];
        if (row0 + r < d) {
          y[t * d + row0 + r] = v;
          if (add) add[t * d + row0 + r] += v;
        }
      }
  }
}

}  // namespace hearth::cuda
