// One activation split for the FP8 correction pass of F16/BF16 prefill GEMMs (gemm-fp8.h): hi =
// fp16(x), lo = e5m2((x - hi) * 2^kLoE5m2Shift). Shared by the split pass (gemm-fp8.cu) and the
// producers that write the split forms themselves (prefill rmsnorm, swiglu), so both give the
// same bytes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace hearth::cuda {

// |x - fp16(x)| is at most half an fp16 ulp of x: 16 for x near fp16's largest finite value
// (65504), 2^-25 where fp16 itself turns subnormal (2^-14). Times 2^11 that is [2^-14, 2^15],
// e5m2's normal range (max 57344): every lo fp16 can leave keeps e5m2's 2^-3 relative precision.
constexpr int kLoE5m2Shift = 11;
constexpr float kLoE5m2Scale = 1.f / float(1 << kLoE5m2Shift);  // the GEMM's scale for lo

__device__ __forceinline__ void split_one(float v, __half& hi, __nv_fp8_storage_t& lo) {
  hi = __float2half_rn(v);
  lo = __nv_cvt_float_to_fp8((v - __half2float(hi)) * float(1 << kLoE5m2Shift), __NV_SATFINITE,
                             __NV_E5M2);
}

}  // namespace hearth::cuda
