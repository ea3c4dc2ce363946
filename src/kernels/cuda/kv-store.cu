// The K/V append on CUDA (ops.h store_kv_rows, Backend::store_kv): f32 rows converted to the
// cache's element type (kv-rows.cuh: the CPU's layout and rounding) into rows pos.. of a linear
// cache or a ring.
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"

namespace hearth::cuda {

namespace {

// Thread i stores element i of src [n_tokens, row_elems]: token t = i / row_elems to row
// (pos + t) % ring_rows (ring_rows 0: row pos + t), pos read on the device when pos_dev is set
// (a captured decode step). Q8_0: a warp is one 32-element block (row_elems % 32 == 0, and the
// grid stride is a multiple of 32, so whole warps stay in the loop together).
__global__ void store_kv_kernel(uint8_t* cache, DType type, int64_t row_bytes, const float* src,
                                const int32_t* pos_dev, int64_t pos_host, int64_t row_elems,
                                int64_t count, int64_t ring_rows) {
  pdl_trigger();
  pdl_wait();
  const int64_t pos = pos_dev ? int64_t(*pos_dev) : pos_host;
  const int lane = threadIdx.x & 31;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const int64_t t = i / row_elems, p = pos + t;
    const int64_t row = ring_rows > 0 ? p % ring_rows : p;
    kv_store_warp(cache + row * row_bytes, i % row_elems, src[i], type, lane);
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
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, 4096);
  return launch_pdl(store_kv_kernel, dim3(unsigned(blocks)), dim3(kThreads), 0, s,
                    static_cast<uint8_t*>(cache), type, kv_byte_offset(type, row_elems), src,
                    pos_dev, pos, row_elems, count, ring_rows);
}

}  // namespace hearth::cuda
