// Programmatic dependent launch (PDL) for the decode kernels: launch_pdl() lets the next kernel
// start while this one drains; every kernel launched through it must call pdl_wait() before it
// touches memory an earlier kernel writes (only immutable weights may be read before).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace hearth::cuda {

// Waits until the grids this one depends on have completed and their writes are visible. A
// no-op for a kernel launched without the PDL attribute.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the dependent grid be scheduled once every block of this grid has called it (or exited);
// its blocks then sit in pdl_wait() until this grid completes, so calling it first is safe.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The device's SM count, asked once (132, an H100/H200's, if the runtime cannot say).
inline int device_sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0)
      v = 132;
    return v;
  }();
  return n;
}

// A kernel launched under PDL; cluster_z > 1: blocks grouped in clusters of (1, 1, cluster_z)
// (the K splits of the batched matmuls, which add up through distributed shared memory).
template <class... KArgs, class... Args>
cudaError_t launch_pdl_clusters(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                cudaStream_t s, unsigned cluster_z, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = 1, attr[1].val.clusterDim.y = 1, attr[1].val.clusterDim.z = cluster_z;
  cfg.attrs = attr;
  cfg.numAttrs = cluster_z > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <class... KArgs, class... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       Args&&... args) {
  return launch_pdl_clusters(kernel, grid, block, smem, s, 1u, std::forward<Args>(args)...);
}

}  // namespace hearth::cuda
