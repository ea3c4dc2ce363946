// Weights on the CUDA device: the prepared form a Weight's backend_data holds (made by the upload
// pipeline, cuda-weight-upload.h), the lazy e4m3 copy F16/BF16 prefill GEMMs use, and the
// device bytes a weight will take (for --gpu-layers auto). New per-weight copy: a field in
// PreparedWeight, freed by its holder, and counted in device_weight_bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "kernels/cuda/cuda-ops.h"
#include "tensor/tensor-view.h"

namespace hearth {

constexpr uint32_t kCudaWeightMagic = 0x43554457;  // "CUDW": backend_data is a PreparedWeight

struct PreparedWeight {
  uint32_t magic = kCudaWeightMagic;
  int device = 0;
  void* mem = nullptr;
  // F16/BF16: the e4m3 copy for the FP8 x_lo pass of prefill GEMMs (gemm-fp8.h), made on the
  // weight's first prefill GEMM (fp8_tried), so weights that never run one (the token
  // embedding, a decode-only LM head) never hold it.
  void* fp8_mem = nullptr;
  bool fp8_tried = false;
  cuda::DeviceWeight dw;
};

// The packed layout's bytes plus the e4m3 copy F16/BF16 weights get at their first prefill
// GEMM (with fp8_prefill, CudaOptions); the source bytes for dtypes the device cannot run.
uint64_t cuda_weight_device_bytes(const TensorView& h, bool fp8_prefill);

// F16/BF16 weights: the e4m3 copy (half the weight's bytes again) for the FP8 x_lo pass of
// prefill GEMMs, once per weight; without it (fp8_prefill false, rows or cols not a multiple
// of 16, other dtypes) those GEMMs run two fp16 passes. Queued on `s`.
Status make_e4m3_copy(PreparedWeight& pw, const std::string& name, bool fp8_prefill,
                      cudaStream_t s);

}  // namespace hearth
