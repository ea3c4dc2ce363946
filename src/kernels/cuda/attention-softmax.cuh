// The online-softmax pieces every CUDA attention kernel shares (attention.cu, attention-prefill.cu,
// attention-masked.cu, attention-batch.cu), so their rows normalise alike, sinks included.
#pragma once

#include <cmath>

#include "kernels/cuda/warp-reduce.cuh"

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

// The split kernels' hand-off: this block's partials made visible device-wide before it counts
// itself in; true in the last of the row's n_live blocks to arrive (every thread), which then
// reads the others' partials from L2.
__device__ __forceinline__ bool last_split_to_arrive(unsigned* counter, int n_live) {
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == unsigned(n_live - 1);
  __syncthreads();
  if (!last) return false;
  __threadfence();
  return true;
}

// A row's split partials (each stride floats: running max, sum, then the outputs) weighed to
// the row's max, by one warp: sw[sp] = e^(m_sp - max) for sp < kMax (0 past n_live); returns
// the max and the weighted sum of the sums.
template <int kMax>
__device__ __forceinline__ float2 split_weights(const float* parts, int n_live, int64_t stride,
                                                float* sw, int lane) {
  float mv[kMax / 32], lv[kMax / 32];
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kMax / 32; ++k) {
    const int sp = lane + 32 * k;
    mv[k] = sp < n_live ? __ldcg(parts + sp * stride) : -INFINITY;
    lv[k] = sp < n_live ? __ldcg(parts + sp * stride + 1) : 0.f;
    mx = fmaxf(mx, mv[k]);
  }
  mx = warp_max(mx);
  float lt = 0.f;
#pragma unroll
  for (int k = 0; k < kMax / 32; ++k) {
    const float wgt = exp_diff(mv[k], mx);
    sw[lane + 32 * k] = wgt;
    lt += lv[k] * wgt;
  }
  return make_float2(mx, warp_sum(lt));
}

}  // namespace hearth::cuda
