// The decode GEMVs' row stores (gemv-int8.cu and matmul.cu): warp-reduced sums written to y, with
// the fused residual add, for one warp per row group or for kSplit warps sharing one.
#pragma once

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

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
