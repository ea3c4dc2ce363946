// CUDA weight preparation (cuda-weights.h): device bytes per weight and the lazy GEMM copies. The
// upload itself is cuda-weight-upload.cpp; the backend (cuda-backend.cpp) only keeps the result.
#include "backend/cuda/cuda-weights.h"

#include "kernels/cuda/gemm-fp8.h"
#include "tensor/dtype.h"

namespace hearth {

namespace {

Status cuda_status(cudaError_t e, const std::string& what) {
  return e == cudaSuccess ? Status::ok() : Status::error(what + ": " + cudaGetErrorString(e));
}

}  // namespace

uint64_t cuda_weight_device_bytes(const TensorView& h, bool fp8_prefill) {
  if (!cuda::supports_dtype(h.dtype) || h.shape.empty() || h.shape.size() > 2) return h.nbytes;
  const uint64_t packed = cuda::packed_layout(h.dtype, h.rows(), h.cols()).total_bytes;
  const uint64_t e4m3 = fp8_prefill ? cuda::weight_e4m3_bytes(h.dtype, h.rows(), h.cols()) : 0;
  return packed + e4m3;
}

namespace {

Status make_half_copy(PreparedWeight& pw, const std::string& name, cudaStream_t s) {
  const size_t bytes = cuda::weight_half_copy_bytes(pw.dw);
  size_t free = 0, total = 0;
  if (bytes == 0 || cudaMemGetInfo(&free, &total) != cudaSuccess || free < bytes ||
      free - bytes < total / 8)
    return Status::ok();
  HEARTH_TRY(cuda_status(cudaMalloc(&pw.half_mem, bytes), "fp16 copy of " + name));
  HEARTH_TRY(
      cuda_status(cuda::launch_weight_half_copy(pw.dw, pw.half_mem, s), "fp16 copy of " + name));
  pw.dw.w16 = static_cast<const uint16_t*>(pw.half_mem);
  return Status::ok();
}

}  // namespace

Status make_gemm_copies(PreparedWeight& pw, const std::string& name, const CudaOptions& opt,
                        cudaStream_t s) {
  pw.copies_made = true;
  if (opt.half_weights) HEARTH_TRY(make_half_copy(pw, name, s));
  const cuda::DeviceWeight& d = pw.dw;
  const size_t bytes = cuda::weight_e4m3_bytes(d.dtype, d.rows, d.cols);
  if (bytes == 0 || !opt.fp8_prefill) return Status::ok();
  const float* scale = nullptr;
  HEARTH_TRY(cuda_status(cudaMalloc(&pw.fp8_mem, bytes), "e4m3 copy of " + name));
  HEARTH_TRY(cuda_status(
      cuda::launch_weight_to_e4m3(d.dtype, d.body, d.rows, d.cols, pw.fp8_mem, &scale, s),
      "e4m3 copy of " + name));
  pw.dw.w8 = static_cast<const uint8_t*>(pw.fp8_mem);
  pw.dw.w8_scale = scale;
  return Status::ok();
}

}  // namespace hearth
