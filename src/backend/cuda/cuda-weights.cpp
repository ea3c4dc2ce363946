// CUDA weight preparation (cuda-weights.h): device bytes per weight and the lazy e4m3 copy. The
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

Status make_e4m3_copy(PreparedWeight& pw, const std::string& name, bool fp8_prefill,
                      cudaStream_t s) {
  pw.fp8_tried = true;
  const cuda::DeviceWeight& d = pw.dw;
  const size_t bytes = cuda::weight_e4m3_bytes(d.dtype, d.rows, d.cols);
  if (bytes == 0 || !fp8_prefill) return Status::ok();
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
