// What the MoE kernels share: the experts' gated activation (grouped prefill and gather decode
// compute the same value: SwiGLU, or gpt-oss's clamped SwiGLU when limit > 0; ops.h swiglu /
// swiglu_clamped), and the down kernels' staging of a token's routed experts.
#pragma once

#include "kernels/cuda/moe-ops.h"

namespace hearth::cuda {

// Token t's k routed experts (k <= 32) for a down kernel, in shared memory: their down weights,
// routing weights and ids. stage_down_route has the block's first k threads fill it; the caller
// synchronizes the block before reading.
struct MoeDownRoute {
  DeviceWeight w[32];
  float weight[32];
  int id[32];
};
__device__ __forceinline__ void stage_down_route(MoeDownRoute& r, const MoeExperts& ex,
                                                 const int32_t* __restrict__ ids,
                                                 const float* __restrict__ weights, int k,
                                                 int64_t t) {
  if (threadIdx.x < k) {
    const int e = ids[t * k + threadIdx.x];
    r.id[threadIdx.x] = e;
    r.w[threadIdx.x] = ex.down[e];
    r.weight[threadIdx.x] = weights[t * k + threadIdx.x];
  }
}

__device__ __forceinline__ float moe_act(float g, float u, float alpha, float limit) {
  if (limit <= 0) return g / (1.0f + expf(-g)) * u;
  g = fminf(g, limit);
  u = fminf(fmaxf(u, -limit), limit);
  return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
}

}  // namespace hearth::cuda
