// The first matmul of a folded RMSNorm (decode-batch.h FoldedNorm): what its epilogue writes for
// one (token, 4 rows) quad of its product, whichever form computed the product (the copy-engine
// form's store_norm_sums, the staged form's reduce_norm_kernel), so both hand the next matmul
// the same bits.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/decode-batch.h"

namespace hearth::cuda {

// y = v, residual (add) += v, next_xh = fp16(residual * w * s[tok]) at e = tok * d + row (a quad
// of launch_batch_x_half's order: x0 x2 x1 x3); returns the new residual's sum of squares over
// the quad. row % 4 == 0, the rows whole.
__device__ __forceinline__ float store_norm_quad(float4 v, int64_t tok, int64_t row, int64_t d,
                                                 float* y, float* add, const FoldedNorm& nm) {
  const int64_t e = tok * d + row;
  *reinterpret_cast<float4*>(y + e) = v;
  float4* a = reinterpret_cast<float4*>(add + e);
  const float4 o = *a;
  const float4 x = make_float4(o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w);
  *a = x;
  const float sc = nm.s[tok];
  const float4 w = *reinterpret_cast<const float4*>(nm.w + row);
  const __half2 lo = __floats2half2_rn(x.x * w.x * sc, x.z * w.z * sc);
  const __half2 hi = __floats2half2_rn(x.y * w.y * sc, x.w * w.w * sc);
  uint2 packed;
  packed.x = *reinterpret_cast<const uint32_t*>(&lo);
  packed.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(static_cast<__half*>(nm.next_xh) + e) = packed;
  return x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
}

}  // namespace hearth::cuda
