// RMSNorm on CUDA: one block per row (or per slice of a row, for decode), sum of squares reduced
// in float across the block, then y = x * rsqrt(mean + eps) * w. Rows of any length. Prefill rows
// can also write y's split forms for the next GEMM (XSplitOut, cuda-ops.h).
#include <algorithm>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rms-scale.cuh"
#include "kernels/cuda/x-split.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 256;
// Rows up to which a norm writing the batched matmul's fp16 x runs in slices (a decode step).
constexpr int64_t kSlicedNormMaxRows = 64;

// With xh, y's fp16 copy for the batched matmul too (launch_batch_x_half's order).
__global__ void __launch_bounds__(kThreads)
    rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                   int64_t n, float eps, __half* __restrict__ xh, float* __restrict__ r_out) {
  pdl_trigger();
  // Block y of gridDim.y writes one slice of the row (all of them re-read it for the sum), so a
  // decode row spreads over several SMs. The weight does not come from the previous kernel: the
  // first slice of it loads before the wait.
  const int64_t first = int64_t(blockIdx.y) * kThreads + threadIdx.x;
  const float w_first = first < n ? __ldg(w + first) : 0.f;
  pdl_wait();
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  const float scale = block_rms_scale<kThreads>(xr, n, eps);
  if (r_out && blockIdx.y == 0 && threadIdx.x == 0) r_out[blockIdx.x] = scale;
  for (int64_t i = first; i < n; i += int64_t(gridDim.y) * kThreads) {
    const float v = xr[i] * scale * (i == first ? w_first : w[i]);
    yr[i] = v;
    if (xh) xh[int64_t(blockIdx.x) * n + batch_half_index(i)] = __float2half_rn(v);
  }
}

// Prefill: one block per row, the plain loops (the sliced kernel's form cost ~3 us more a
// launch at 512 rows on the H200: 494 -> 696 us per pass).
// With hi / lo8 set, y's split forms for the next prefill GEMM too (x-split.cuh); with xh, its
// fp16 copy for the batched matmul (launch_batch_x_half's order).
__global__ void __launch_bounds__(kThreads)
    rmsnorm_rows_kernel(const float* __restrict__ x, const float* __restrict__ w,
                        float* __restrict__ y, int64_t n, float eps, __half* __restrict__ hi,
                        __nv_fp8_storage_t* __restrict__ lo8, float* lo_scale,
                        __half* __restrict__ xh, float* __restrict__ r_out) {
  pdl_trigger();
  pdl_wait();
  const int64_t row = int64_t(blockIdx.x) * n;
  const float* xr = x + row;
  float* yr = y + row;
  const float scale = block_rms_scale<kThreads, false>(xr, n, eps);
  if (r_out && threadIdx.x == 0) r_out[blockIdx.x] = scale;
  if (!hi) {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float v = xr[i] * scale * w[i];
      yr[i] = v;
      if (xh) xh[row + batch_half_index(i)] = __float2half_rn(v);
    }
    return;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *lo_scale = kLoE5m2Scale;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = xr[i] * scale * w[i];
    yr[i] = v;
    split_one(v, hi[row + i], lo8[row + i]);
  }
}

}  // namespace

cudaError_t launch_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                           float eps, cudaStream_t s, const XSplitOut* split, void* xh,
                           float* r_out) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  if (split) {
    if (rows <= kGemvMaxTokens || !split->hi || !split->lo8 || !split->scale || xh)
      return cudaErrorInvalidValue;
    return launch_pdl(rmsnorm_rows_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, s, x, w, y, n,
                      eps, static_cast<__half*>(split->hi), split->lo8, split->scale,
                      static_cast<__half*>(nullptr), r_out);
  }
  if (xh && (rows <= kGemvMaxTokens || n % 4 != 0)) return cudaErrorInvalidValue;
  // A decode step's rows with their fp16 copy: in slices of ~1024 elements, so 32 rows of 4096
  // spread over 128 blocks, not 32 (H200, 7B x 32 sequences: ~8 us a launch one block a row).
  if (xh && rows <= kSlicedNormMaxRows && x != y) {
    const int64_t slices = std::clamp<int64_t>(n / (4 * kThreads), 1, 64);
    return launch_pdl(rmsnorm_kernel, dim3(unsigned(rows), unsigned(slices)), dim3(kThreads), 0, s,
                      x, w, y, n, eps, static_cast<__half*>(xh), r_out);
  }
  // Prefill rows: one block per row.
  if (rows > kGemvMaxTokens)
    return launch_pdl(rmsnorm_rows_kernel, dim3(unsigned(rows)), dim3(kThreads), 0, s, x, w, y, n,
                      eps, static_cast<__half*>(nullptr), static_cast<__nv_fp8_storage_t*>(nullptr),
                      static_cast<float*>(nullptr), static_cast<__half*>(xh), r_out);
  // Decode-sized batches: each row in slices, so a few rows still spread over the SMs.
  // In place (a sandwich post-norm, a per-head norm), one slice: another slice's writes would
  // race with this one's reading the row for its sum.
  int64_t slices = (n + kThreads - 1) / kThreads;
  if (slices > 64) slices = 64;
  if (x == y) slices = 1;
  return launch_pdl(rmsnorm_kernel, dim3(unsigned(rows), unsigned(slices)), dim3(kThreads), 0, s, x,
                    w, y, n, eps, static_cast<__half*>(nullptr), r_out);
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
