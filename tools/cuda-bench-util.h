// Helpers of hearth-cuda-bench (cuda-bench.cpp, cuda-bench-batch.cpp): graph timing and weights
// replicated past L2.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "../tests/ops/cuda/random-weights.h"
#include "kernels/cuda/cuda-ops.h"

namespace hearth::cuda_bench {

inline bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "cuda-bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per launch of `body` (which enqueues `per_graph` launches), timed over graph replays;
// NaN (and a line on stderr) when the capture or its graph fails.
template <class Body>
inline double time_graph(cudaStream_t s, int per_graph, Body body) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  body();
  const cudaError_t captured = cudaStreamEndCapture(s, &graph);
  if (captured != cudaSuccess || !graph || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    std::fprintf(stderr, "cuda-bench: graph capture failed: %s\n",
                 cudaGetErrorString(captured != cudaSuccess ? captured : cudaGetLastError()));
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return std::nan("");
  }
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaGraphLaunch(exec, s);  // warm-up
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(exec, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    times.push_back(ms * 1e-3 / per_graph);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(times);
}

// W of dtype t {rows, cols} (random bytes, seed 7) packed on the device and copied to enough
// replicas (over 512 MB in all) that rotating over them reads HBM, not L2.
struct WeightReplicas {
  uint64_t raw = 0;  // ggml bytes of one copy
  std::vector<uint8_t*> packed;
  std::vector<cuda::DeviceWeight> w;
  bool make(DType t, int64_t rows, int64_t cols, cudaStream_t s) {
    raw = *row_bytes(t, uint64_t(cols)) * uint64_t(rows);
    const cuda::PackedLayout layout = cuda::packed_layout(t, rows, cols);
    const int n = int(std::max<uint64_t>(2, (uint64_t(512) << 20) / raw + 1));
    const std::vector<uint8_t> host = test::random_weight_bytes(t, rows, cols, 7);
    uint8_t* raw_dev = nullptr;
    packed.assign(size_t(n), nullptr);
    bool good = ok(cudaMalloc(reinterpret_cast<void**>(&raw_dev), raw), "malloc raw");
    for (auto& p : packed)
      good = good && ok(cudaMalloc(reinterpret_cast<void**>(&p), layout.total_bytes), "malloc w");
    if (good) {
      cudaMemcpy(raw_dev, host.data(), raw, cudaMemcpyHostToDevice);
      cuda::launch_repack(t, raw_dev, packed[0], rows, cols, s);
      for (int r = 1; r < n; ++r)
        cudaMemcpyAsync(packed[size_t(r)], packed[0], layout.total_bytes, cudaMemcpyDeviceToDevice,
                        s);
      good = ok(cudaStreamSynchronize(s), "repack");
    }
    cudaFree(raw_dev);
    for (auto* p : packed) w.push_back(cuda::make_device_weight(t, rows, cols, p));
    return good;
  }
  int count() const { return int(packed.size()); }
  ~WeightReplicas() {
    for (auto* p : packed) cudaFree(p);
  }
};

}  // namespace hearth::cuda_bench
