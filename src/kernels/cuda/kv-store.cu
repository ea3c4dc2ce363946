// The K/V append on CUDA (ops.h store_kv_rows, Backend::store_kv): f32 rows converted to the
// cache's element type (kv-rows.cuh: the CPU's layout and rounding) into rows pos.. of a linear
// cache or a ring.
#include <algorithm>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"

namespace hearth::cuda {

namespace {

// Block (x, y) stores elements x * blockDim + threadIdx.x (grid-strided) of tokens y, y +
// gridDim.y, ... of src [n_tokens, row_elems]: token t to row (pos + t) % ring_rows (ring_rows
// 0: row pos + t), pos read on the device when pos_dev is set (a captured decode step). Indices
// within a row are 32-bit and the row is found once per token: no 64-bit division per element
// (a 512-token prefill stores 2M elements per layer). Q8_0: a warp is one 32-element block
// (row_elems % 32 == 0 and the stride is a multiple of 32, so whole warps stay in the loop).
__global__ void store_kv_kernel(uint8_t* cache, DType type, int64_t row_bytes, const float* src,
                                const int32_t* pos_dev, int64_t pos_host, int row_elems,
                                int64_t n_tokens, int64_t ring_rows) {
  pdl_trigger();
  pdl_wait();
  const int64_t pos = pos_dev ? int64_t(*pos_dev) : pos_host;
  const int lane = threadIdx.x & 31;
  for (int64_t t = blockIdx.y; t < n_tokens; t += gridDim.y) {
    const int64_t p = pos + t;
    uint8_t* dst = cache + (ring_rows > 0 ? p % ring_rows : p) * row_bytes;
    const float* row = src + t * row_elems;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row_elems; i += gridDim.x * blockDim.x)
      kv_store_warp(dst, i, row[i], type, lane);
  }
}

}  // namespace

cudaError_t launch_store_kv(void* cache, DType type, const float* src, const int32_t* pos_dev,
                            int64_t pos, int64_t row_elems, int64_t n_tokens, int64_t ring_rows,
                            cudaStream_t s) {
  const int64_t count = row_elems * n_tokens;
  if (count <= 0) return cudaSuccess;
  if (!is_cuda_kv_type(type) || (type == DType::Q8_0 && row_elems % 32 != 0) || ring_rows < 0 ||
      (ring_rows > 0 && n_tokens > ring_rows))
    return cudaErrorInvalidValue;
  if (row_elems > 0x7fffffff) return cudaErrorInvalidValue;
  constexpr int kThreads = 256;
  const int64_t x = std::min<int64_t>((row_elems + kThreads - 1) / kThreads, 64);
  const int64_t y = std::min<int64_t>(n_tokens, 65535);
  return launch_pdl(store_kv_kernel, dim3(unsigned(x), unsigned(y)), dim3(kThreads), 0, s,
                    static_cast<uint8_t*>(cache), type, kv_byte_offset(type, row_elems), src,
                    pos_dev, pos, int(row_elems), n_tokens, ring_rows);
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
