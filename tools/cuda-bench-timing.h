// Timing helpers of hearth-cuda-bench (cuda-bench.cpp, cuda-bench-batch.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

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

// Seconds per launch of `body` (which enqueues `per_graph` launches), timed over graph replays.
template <class Body>
inline double time_graph(cudaStream_t s, int per_graph, Body body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  body();
  cudaStreamEndCapture(s, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
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

}  // namespace hearth::cuda_bench
