// One token's top-k routing on one warp (moe-ops.h launch_moe_route's rule): the router kernel
// runs it per token, and the decode gate+up kernels run it at their start (each block for its
// own token), so a decode layer needs no separate routing launch.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/moe-ops.h"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

// Logits z [n_expert] (n_expert <= kMoeMaxExperts, 1 <= k <= min(n_expert, 32)); every lane of
// the warp calls it, and lane j < k gets pick j: its expert and routing weight. Lane l holds
// experts l, l + 32, ... The arithmetic follows the host rule (kernels/cpu/moe-route.cpp):
// float exp, a double sum, probabilities rounded to float before they are compared, so equal
// logits give equal probabilities and the lower index wins.
__device__ __forceinline__ void route_warp(const float* __restrict__ z, int n_expert, int k,
                                           bool renorm, int lane, int& id, float& weight) {
  constexpr int kPerLane = int(kMoeMaxExperts / 32);
  float p[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < n_expert ? z[e] : NAN;
    if (p[i] > mx) mx = p[i];  // NaN never raises the max
  }
  mx = warp_max(mx);
  // (Past n_expert nothing is computed: n_expert is usually a multiple of 32, so those
  // branches are whole-warp ones and a 128-expert router pays for 4 of the 16 slots.)
  double sum = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (lane + 32 * i >= n_expert) continue;
    p[i] = std::isnan(p[i]) ? 0.0f : expf(p[i] - mx);
    sum += p[i];
  }
  sum = warp_sum_double(sum);
  // Each probability as an ordered key: its bits + 2 (a probability is >= +0, so its bits order
  // as the floats do), 1 for a NaN probability (an overflowed logit upstream: it ranks lowest
  // instead of never, so the ids stay in range whatever the logits hold, as the host rule always
  // picks an expert), 0 for no expert. A pick is then two warp reductions (the largest key, then
  // the lowest expert holding it) instead of a shuffle butterfly over (key, expert) pairs.
  unsigned key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    key[i] = 0u;
    if (lane + 32 * i >= n_expert) continue;
    const float q = float(double(p[i]) / sum);
    key[i] = std::isnan(q) ? 1u : __float_as_uint(q) + 2u;
  }
  double picked = 0;
  for (int j = 0; j < k; ++j) {
    // The lane's best untaken expert (the lowest of its equal keys: strictly greater).
    unsigned best = 0;
    int best_i = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (key[i] > best) best = key[i], best_i = i;
    const unsigned top = __reduce_max_sync(0xffffffffu, best);
    const unsigned e =
        __reduce_min_sync(0xffffffffu, best == top ? unsigned(lane + 32 * best_i) : 0xffffffffu);
    if (int(e & 31) == lane) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (i == int(e >> 5)) key[i] = 0;  // taken (a register index known at compile time)
    }
    const float prob = top == 1u ? NAN : __uint_as_float(top - 2u);
    picked += prob;
    if (lane == j) weight = prob, id = int(e);
  }
  if (lane < k && renorm && picked > 0) weight = float(double(weight) / picked);
}

// A launcher's check of its optional router (null: ids are given).
inline bool moe_router_ok(const MoeRouter* r, int64_t k) {
  return !r || (r->logits && r->weights && r->n_expert >= k && r->n_expert <= kMoeMaxExperts);
}

// A gate+up block's expert: slot s of token s / k, routed by warp 0 when route.logits is set
// (block x == 0 of the token's first slot then writes the token's ids and weights for the down
// launch), else read from ids. Every thread of the block calls it (it synchronises the block).
__device__ __forceinline__ int gate_up_expert(const MoeRouter& route, int32_t* ids, int k,
                                              int64_t s) {
  if (!route.logits) return ids[s];
  __shared__ int expert;
  const int lane = threadIdx.x & 31;
  const int64_t t = s / k;
  const int j = int(s - t * k);
  if (threadIdx.x < 32) {
    int id = 0;
    float weight = 0;
    route_warp(route.logits + t * route.n_expert, route.n_expert, k, route.renorm, lane, id,
               weight);
    if (lane == j) expert = id;
    if (blockIdx.x == 0 && j == 0 && lane < k)
      ids[t * k + lane] = id, route.weights[t * k + lane] = weight;
  }
  __syncthreads();
  return expert;
}

}  // namespace hearth::cuda
