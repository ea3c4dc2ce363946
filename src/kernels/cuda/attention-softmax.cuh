// The online-softmax pieces every CUDA attention kernel shares (attention.cu, attention-prefill.cu,
// attention-masked.cu, attention-batch.cu), so their rows normalise alike, sinks included.
#pragma once

#include <cmath>

namespace hearth::cuda {

// exp(a - b) that is 0, not NaN, when both are -inf (an empty running max).
__device__ __forceinline__ float exp_diff(float a, float b) {
  return a == -INFINITY ? 0.f : __expf(a - b);
}

// The factor that turns a row's unnormalised output (running max m, sum l, over scaled scores)
// into the attention output, as the CPU's output_factor: without sinks 1 / l; with gpt-oss's
// sink logit for head h, M = max(m, sink) and out = acc e^(m-M) / (l e^(m-M) + e^(sink-M)).
__device__ __forceinline__ float softmax_out_factor(float m, float l, const float* sinks, int h) {
  if (!sinks) return 1.f / l;
  const float sink = sinks[h];
  const float top = fmaxf(m, sink);
  const float c = exp_diff(m, top);
  return c / (l * c + __expf(sink - top));
}

// The first half of merging a block's warps' online-softmax states (running max m, sum l, and
// EPT output dims per lane: a head of 32 * EPT): each warp's state to shared memory, then the
// block's max (every thread). The caller rescales sm.acc and sm.l to that max per dim.
template <int kWarps, int EPT>
struct WarpStates {
  float m[kWarps], l[kWarps], acc[kWarps][32 * EPT];
};
template <int kWarps, int EPT>
__device__ __forceinline__ float share_warp_states(WarpStates<kWarps, EPT>& sm, float m, float l,
                                                   const float (&acc)[EPT], int warp, int lane) {
  if (lane == 0) sm.m[warp] = m, sm.l[warp] = l;
#pragma unroll
  for (int i = 0; i < EPT; ++i) sm.acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float top = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) top = fmaxf(top, sm.m[w]);
  return top;
}

}  // namespace hearth::cuda
