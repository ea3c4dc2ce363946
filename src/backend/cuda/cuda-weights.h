// Weights on the CUDA device: the prepared form a Weight's backend_data holds (made by the upload
// pipeline, cuda-weight-upload.h), the lazy copies GEMMs read (e4m3 for F16/BF16, fp16 for
// quantized dtypes), and the device bytes a weight will take (for --gpu-layers auto). New
// per-weight copy: a field in PreparedWeight, freed by its holder, and counted in
// device_weight_bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "backend/cuda-options.h"
#include "base/status.h"
#include "kernels/cuda/cuda-ops.h"
#include "tensor/tensor-view.h"

namespace hearth {

constexpr uint32_t kCudaWeightMagic = 0x43554457;  // "CUDW": backend_data is a PreparedWeight

struct PreparedWeight {
  uint32_t magic = kCudaWeightMagic;
  int device = 0;
  void* mem = nullptr;
  // The copies GEMMs read, made on the weight's first GEMM (copies_made), so weights that never
  // run one (the token embedding, a decode-only LM head) never hold them. F16/BF16: the e4m3
  // copy for the FP8 x_lo pass of prefill GEMMs (gemm-fp8.h). Quantized dtypes: the fp16 copy
  // (DeviceWeight::w16, CudaOptions::half_weights).
  void* fp8_mem = nullptr;
  void* half_mem = nullptr;
  bool copies_made = false;
  cuda::DeviceWeight dw;
};

// Passes of at least this many rows take a weight's fp16 copy (CudaOptions::half_weights)
// instead of the batched int8 matmul: above 64 rows that matmul runs a second token group.
// H200, Q4_0, us for 4096x4096 / 11008x4096 / 4096x11008, batched int8 against cuBLAS on the
// copy (hearth-cuda-bench --batch-only): 32 rows 10.8 / 17.6 / 22.4 against 17.4 / 31.0 / 36.3;
// 64: 15.0 / 29.6 / 29.3 against 15.1 / 29.8 / 35.2; 96: 20.5 / 51.7 / 44.2 against 18.9 /
// 29.4 / 34.5; 256: 43.9 / 114.0 / 96.7 against 20.9 / 37.1 / 47.1.
constexpr int64_t kHalfCopyMinTokens = 65;

// The packed layout's bytes plus the e4m3 copy F16/BF16 weights get at their first prefill
// GEMM (with fp8_prefill, CudaOptions); the source bytes for dtypes the device cannot run. The
// fp16 copies of quantized weights are not counted: they are made only where memory is spare.
uint64_t cuda_weight_device_bytes(const TensorView& h, bool fp8_prefill);

// A weight's copies for GEMMs, once per weight, queued on `s`: the e4m3 copy (half the weight's
// bytes again) of an F16/BF16 weight for the FP8 x_lo pass (without it: fp8_prefill false,
// rows or cols not a multiple of 16, those GEMMs run two fp16 passes), and with half_weights
// the fp16 copy of a quantized one, made only while an eighth of the device's memory stays
// free after it (without it W is dequantized per GEMM). The backend frees the fp16 copies when
// memory for KV rows or scratch runs short (CudaBackend::drop_half_copies).
Status make_gemm_copies(PreparedWeight& pw, const std::string& name, const CudaOptions& opt,
                        cudaStream_t s);

}  // namespace hearth
