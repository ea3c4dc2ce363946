// hearth-cuda-bench's batched decode matmul table (cuda-bench-batch.cpp).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace hearth::cuda_bench {

// For Q4_0, Q8_0 and Q4_K (those in `only` when set) on the 7B shapes: B = 1..256 rows through
// the decode kernel the backend picks (GEMV up to 4, the batched int8 matmul above) and through
// the prefill path (dequantize + cuBLAS), as time, GB/s of weights and TOPS. False on an error.
// batches / shapes (comma-separated lists such as "32,64" and "11008x4096"; null: all) narrow the
// table, for a profiler run of one kernel.
bool batch_matmul_table(cudaStream_t s, cublasHandle_t blas, const char* only, double copy_gbs,
                        const char* batches = nullptr, const char* shapes = nullptr);

}  // namespace hearth::cuda_bench
