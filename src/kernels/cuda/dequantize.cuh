// Shared pieces of the CUDA kernels: dtype dispatch to templates, plain-type element reads, and
// the dequantize-to-fp16 launchers matmul.cu's GEMM path uses. Internal to src/kernels/cuda.
#pragma once

#include <type_traits>

#include "kernels/cuda/quant-device.cuh"

namespace hearth::cuda {

// Calls fn(std::integral_constant<DType, T>{}) for the runtime dtype; false when unsupported.
template <class Fn>
bool dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
#define HEARTH_DT(T)                        \
  case T:                                   \
    fn(std::integral_constant<DType, T>{}); \
    return true;
    HEARTH_DT(DType::F32)
    HEARTH_DT(DType::F16)
    HEARTH_DT(DType::BF16)
    HEARTH_DT(DType::Q8_0)
    HEARTH_DT(DType::Q4_0)
    HEARTH_DT(DType::Q4_1)
    HEARTH_DT(DType::Q5_0)
    HEARTH_DT(DType::Q5_1)
    HEARTH_DT(DType::Q4_K)
    HEARTH_DT(DType::Q5_K)
    HEARTH_DT(DType::Q6_K)
    HEARTH_DT(DType::MXFP4)
#undef HEARTH_DT
    default:
      return false;
  }
}

// Element i (flat index) of a plain-dtype weight; quantized types never take this path.
__device__ __forceinline__ float plain_at(const DeviceWeight& w, int64_t i) {
  if (w.dtype == DType::F32) return reinterpret_cast<const float*>(w.body)[i];
  const uint16_t h = reinterpret_cast<const uint16_t*>(w.body)[i];
  return w.dtype == DType::F16 ? half_bits(h) : __uint_as_float(uint32_t(h) << 16);
}

// W {rows, cols} -> fp16 row-major (out holds rows*cols halves, 16-byte aligned).
cudaError_t launch_weight_to_f16(const DeviceWeight& w, __half* out, cudaStream_t s);
cudaError_t launch_f32_to_f16(const float* x, __half* y, int64_t n, cudaStream_t s);

}  // namespace hearth::cuda
