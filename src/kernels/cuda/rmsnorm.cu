// RMSNorm on CUDA: one block per row, sum of squares reduced in float across the block, then
// y = x * rsqrt(mean + eps) * w. Rows up to any length (threads stride the row).
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rms-scale.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                   int64_t n, float eps) {
  pdl_trigger();
  pdl_wait();
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  const float scale = block_rms_scale<kThreads>(xr, n, eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = xr[i] * scale * w[i];
}

}  // namespace

cudaError_t launch_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                           float eps, cudaStream_t s) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  return launch_pdl(rmsnorm_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, s, x, w, y, n, eps);
}

}  // namespace hearth::cuda
