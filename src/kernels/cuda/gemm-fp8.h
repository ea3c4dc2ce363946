// FP8 correction pass for F16/BF16 prefill GEMMs (gemm-fp8.cu): y = W.fp16(x) + W8.e5m2(x_lo),
// x_lo = x - fp16(x), the second pass at FP8 rate instead of a second fp16 pass. matmul.cu uses
// it when the weight carries an e4m3 copy (DeviceWeight::w8, made by the backend on a weight's
// first prefill GEMM); tools/cuda-bench.cpp measures it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

typedef struct cublasContext* cublasHandle_t;

namespace hearth::cuda {

// False once an FP8 GEMM failed on the device in this process (matmul.cu then keeps to two fp16
// passes for good).
bool gemm_fp8_working();
void gemm_fp8_mark_failed();

// Bytes of an e4m3 weight copy for {rows, cols} (the quants, then its scale and a scratch
// float). 0 when the shape or dtype cannot take the FP8 pass (F16/BF16, rows and cols % 16).
size_t weight_e4m3_bytes(DType t, int64_t rows, int64_t cols);
// buf (weight_e4m3_bytes) = e4m3(w / s), s = amax|w| / 448 stored after the quants;
// *scale_out points at s. w: F16 or BF16, n = rows * cols values.
cudaError_t launch_weight_to_e4m3(DType t, const void* w, int64_t rows, int64_t cols, void* buf,
                                  const float** scale_out, cudaStream_t s);
// hi16[i] = fp16(x[i]); lo8[i] = e5m2((x[i] - hi16[i]) / s) at the fixed scale s = 2^-11 (one
// pass over x: e5m2's range covers every x_lo an fp16 hi leaves, see gemm-fp8.cu), s written to
// scale_dev[0]; scale_dev[1] is scratch.
cudaError_t launch_split_x_fp8(const float* x, int64_t n, void* hi16, uint8_t* lo8,
                               float* scale_dev, cudaStream_t s);
// p[i] uniform in [lo, hi) from a hash of (i, seed): non-trivial test data on the device.
cudaError_t launch_hash_fill(float* p, int64_t n, uint32_t seed, float lo, float hi,
                             cudaStream_t s);
// y [T, rows] += (w_scale W8) . (x_scale X8)^T through cuBLASLt (the cuBLAS handle, cast).
// W8 {rows, cols} e4m3, X8 [T, cols] e5m2 (launch_split_x_fp8), cols % 16 == 0. Descriptors and the
// algorithm are cached per shape; fp8_gemm_supported() says whether cuBLASLt has an algorithm for a
// shape (fp8_gemm_accumulate returns cudaErrorNotSupported otherwise). workspace: kFp8LtWorkspace.
constexpr size_t kFp8LtWorkspace = size_t(32) << 20;
bool fp8_gemm_supported(cublasHandle_t blas, int64_t rows, int64_t cols, int64_t n_tokens);
cudaError_t fp8_gemm_accumulate(cublasHandle_t blas, const uint8_t* w8, const float* w_scale,
                                const uint8_t* x8, const float* x_scale, float* y, int64_t rows,
                                int64_t cols, int64_t n_tokens, void* workspace,
                                size_t workspace_bytes, cudaStream_t s);

}  // namespace hearth::cuda
