// The prefill GEMMs on fp16 operands (matmul.cu: W16 {rows, cols} against x16 [T, cols], f32 y)
// through cuBLASLt with one algorithm per weight shape and token bucket, chosen once. Through
// cublasGemmEx every token count cuBLAS had not seen cost a first call of milliseconds (H200,
// 7B: a server's first 139-token step 44 ms against 14 once a pass of that size had run, a
// fresh size again each time a prompt's length was new); with an algorithm per bucket a new
// length costs only its descriptors.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

typedef struct cublasContext* cublasHandle_t;

namespace hearth::cuda {

// The token bucket a count falls in: the next power of two from 128 (the algorithm is the one
// cuBLASLt's heuristic picks for the bucket's largest count).
int64_t gemm_half_bucket(int64_t n_tokens);
// y [T, rows] = w16 . x16^T + beta y. cudaErrorNotSupported when cuBLASLt has no algorithm for
// the shape (the caller then takes cublasGemmEx). workspace: kGemmHalfLtWorkspace bytes or null.
constexpr size_t kGemmHalfLtWorkspace = size_t(32) << 20;
cudaError_t gemm_half_lt(cublasHandle_t blas, const __half* w16, const __half* x16, float* y,
                         int64_t rows, int64_t cols, int64_t n_tokens, float beta, void* workspace,
                         size_t workspace_bytes, cudaStream_t s);

}  // namespace hearth::cuda
