// Element-wise ops on CUDA: SwiGLU, residual add, bias add, KV row store, fill. Grid-stride
// loops; these are memory-bound and a small share of a token next to matmul.
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/launch.cuh"

namespace hearth::cuda {

namespace {

unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return unsigned(b < 8192 ? (b > 0 ? b : 1) : 8192);
}

#define HEARTH_GRID_STRIDE(i, n)                                            \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
  pdl_trigger();
  pdl_wait();
  HEARTH_GRID_STRIDE(i, n) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  pdl_trigger();
  pdl_wait();
  HEARTH_GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void bias_kernel(float* y, const float* bias, int64_t rows, int64_t n) {
  HEARTH_GRID_STRIDE(i, rows * n) y[i] += bias[i % n];
}

// pos is read on the device so a captured decode graph appends at the current position.
__global__ void store_rows_offset_kernel(float* cache, const float* src, const int32_t* pos,
                                         int64_t row_floats, int64_t count) {
  pdl_trigger();
  pdl_wait();
  float* dst = cache + int64_t(*pos) * row_floats;
  HEARTH_GRID_STRIDE(i, count) dst[i] = src[i];
}

__global__ void fill_kernel(float* p, float v, int64_t n) {
  HEARTH_GRID_STRIDE(i, n) p[i] = v;
}

__global__ void copy16_kernel(float4* dst, const float4* src, int64_t n4) {
  HEARTH_GRID_STRIDE(i, n4) dst[i] = __ldg(src + i);
}

}  // namespace

bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("HEARTH_CUDA_PDL");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

bool gemv_pipe_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("HEARTH_CUDA_GEMV_PIPE");
    return e && std::strcmp(e, "1") == 0;
  }();
  return on;
}

cudaError_t launch_copy16(float* dst, const float* src, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  copy16_kernel<<<132 * 16, 256, 0, s>>>(reinterpret_cast<float4*>(dst),
                                         reinterpret_cast<const float4*>(src), n / 4);
  return cudaGetLastError();
}

cudaError_t launch_swiglu(const float* gate, const float* up, float* out, int64_t n,
                          cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  return launch_pdl(swiglu_kernel, dim3(grid_for(n)), dim3(256), 0, s, gate, up, out, n);
}

cudaError_t launch_add_inplace(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  return launch_pdl(add_kernel, dim3(grid_for(n)), dim3(256), 0, s, y, x, n);
}

cudaError_t launch_add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  bias_kernel<<<grid_for(rows * n), 256, 0, s>>>(y, bias, rows, n);
  return cudaGetLastError();
}

cudaError_t launch_store_rows(float* cache, const float* src, const int32_t* pos,
                              int64_t row_floats, int64_t n_tokens, cudaStream_t s) {
  const int64_t count = row_floats * n_tokens;
  if (count <= 0) return cudaSuccess;
  return launch_pdl(store_rows_offset_kernel, dim3(grid_for(count)), dim3(256), 0, s, cache, src,
                    pos, row_floats, count);
}

cudaError_t launch_fill(float* p, float value, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  fill_kernel<<<grid_for(n), 256, 0, s>>>(p, value, n);
  return cudaGetLastError();
}

}  // namespace hearth::cuda
