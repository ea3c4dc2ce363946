// The MoE router on the device (moe-ops.h): top-k routing per token, the grouping of slots by
// expert for prefill, and the gather / weighted scatter around the per-expert GEMMs. Nothing
// here is timed against the matmuls: each is a few microseconds per layer.
#include <cmath>

#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe-act.cuh"
#include "kernels/cuda/moe-ops.h"
#include "kernels/cuda/moe-route.cuh"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

namespace {

constexpr int kRouteWarps = 4;

// One warp per token (route_warp).
__global__ void moe_route_kernel(const float* __restrict__ logits, int64_t n_tokens, int n_expert,
                                 int k, bool renorm, int32_t* __restrict__ ids,
                                 float* __restrict__ weights) {
  pdl_trigger();
  pdl_wait();  // the logits come from the router's GEMV
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (t >= n_tokens) return;
  int id = 0;
  float weight = 0;
  route_warp(logits + t * n_expert, n_expert, k, renorm, lane, id, weight);
  if (lane < k) ids[t * k + lane] = id, weights[t * k + lane] = weight;
}

// One block: thread e counts expert e's slots, thread 0 makes the offsets, then thread e lists
// its slots in ascending order (a stable counting sort; n_expert <= kMoeMaxExperts).
__global__ void moe_group_kernel(const int32_t* __restrict__ ids, int64_t n_slots, int n_expert,
                                 int32_t* __restrict__ offsets, int32_t* __restrict__ order,
                                 int32_t* __restrict__ pos_of) {
  __shared__ int32_t start[kMoeMaxExperts + 1];
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    int32_t n = 0;
    for (int64_t s = 0; s < n_slots; ++s) n += ids[s] == e;
    start[e + 1] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    start[0] = 0;
    for (int e = 0; e < n_expert; ++e) start[e + 1] += start[e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= n_expert; e += blockDim.x) offsets[e] = start[e];
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    int32_t at = start[e];
    for (int64_t s = 0; s < n_slots; ++s)
      if (ids[s] == e) order[at] = int32_t(s), pos_of[s] = at++;
  }
}

__global__ void moe_gather_kernel(const float* __restrict__ x, const int32_t* __restrict__ order,
                                  int k, int64_t n, float* __restrict__ rows) {
  const int64_t i = blockIdx.x;
  const float* src = x + int64_t(order[i] / k) * n;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) rows[i * n + c] = src[c];
}

__global__ void moe_scatter_kernel(const float* __restrict__ rows,
                                   const int32_t* __restrict__ pos_of,
                                   const float* __restrict__ weights, int k, int64_t n,
                                   float* __restrict__ out, bool accumulate) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < k; ++j)
      acc += weights[t * k + j] * rows[int64_t(pos_of[t * k + j]) * n + c];
    out[t * n + c] = accumulate ? out[t * n + c] + acc : acc;
  }
}

__global__ void moe_act_kernel(const float* gate, const float* up, float* out, int64_t n,
                               float alpha, float limit) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = moe_act(gate[i], up[i], alpha, limit);
}

unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace

cudaError_t launch_moe_route(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t k,
                             bool renorm, int32_t* ids, float* weights, cudaStream_t s) {
  if (n_tokens <= 0) return cudaSuccess;
  if (n_expert < 1 || n_expert > kMoeMaxExperts || k < 1 || k > n_expert || k > 32)
    return cudaErrorInvalidValue;
  const unsigned grid = unsigned((n_tokens + kRouteWarps - 1) / kRouteWarps);
  // Launched as a dependent (launch.cuh): its start overlaps the router GEMV's tail, and the
  // gather-GEMVs after it do the same.
  return launch_pdl(moe_route_kernel, dim3(grid), dim3(kRouteWarps * 32), 0, s, logits, n_tokens,
                    int(n_expert), int(k), renorm, ids, weights);
}

cudaError_t launch_moe_group(const int32_t* ids, int64_t n_slots, int64_t n_expert,
                             int32_t* offsets, int32_t* order, int32_t* pos_of, cudaStream_t s) {
  if (n_expert < 1 || n_expert > kMoeMaxExperts) return cudaErrorInvalidValue;
  moe_group_kernel<<<1, 512, 0, s>>>(ids, n_slots, int(n_expert), offsets, order, pos_of);
  return cudaGetLastError();
}

cudaError_t launch_moe_gather(const float* x, const int32_t* order, int64_t n_slots, int64_t k,
                              int64_t n, float* rows, cudaStream_t s) {
  if (n_slots <= 0) return cudaSuccess;
  moe_gather_kernel<<<unsigned(n_slots), 256, 0, s>>>(x, order, int(k), n, rows);
  return cudaGetLastError();
}

cudaError_t launch_moe_scatter(const float* rows, const int32_t* pos_of, const float* weights,
                               int64_t n_tokens, int64_t k, int64_t n, float* out, bool accumulate,
                               cudaStream_t s) {
  if (n_tokens <= 0) return cudaSuccess;
  moe_scatter_kernel<<<unsigned(n_tokens), 256, 0, s>>>(rows, pos_of, weights, int(k), n, out,
                                                        accumulate);
  return cudaGetLastError();
}

cudaError_t launch_moe_act(const float* gate, const float* up, float* out, int64_t n, float alpha,
                           float limit, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  moe_act_kernel<<<blocks_for(n, 256), 256, 0, s>>>(gate, up, out, n, alpha, limit);
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
