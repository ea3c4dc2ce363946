// The device-memory read probe behind CudaBackend::measure_read_bandwidth_gbs (hearth bench's
// decode roofline on the GPU): every 16-byte word of a buffer read once, as a decode GEMV
// streams its weights. Extend: another access pattern gets its own kernel and launcher here.
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/kernel-modules.cuh"

namespace hearth::cuda {

namespace {

// Grid-stride over uint4 words, loads kept in flight four at a time, bypassing L1 (the buffer
// is far larger than L2, so each word comes from HBM). The XOR goes to *sink only when it
// equals a value it practically never takes, so the loads cannot be dropped.
__global__ void read_probe_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcg(p + i), b = __ldcg(p + i + stride);
    const uint4 c = __ldcg(p + i + 2 * stride), d = __ldcg(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcg(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

}  // namespace

cudaError_t launch_read_probe(const void* buf, size_t bytes, unsigned* sink, cudaStream_t s) {
  if (!buf || !sink || bytes < 16) return cudaErrorInvalidValue;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  read_probe_kernel<<<unsigned(sms * 4), 512, 0, s>>>(static_cast<const uint4*>(buf), bytes / 16,
                                                      sink);
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
