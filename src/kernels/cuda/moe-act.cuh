// The experts' gated activation, shared by the grouped (prefill) and gather (decode) paths so
// both compute the same value: SwiGLU, or gpt-oss's clamped SwiGLU when limit > 0 (ops.h
// swiglu / swiglu_clamped).
#pragma once

namespace hearth::cuda {

__device__ __forceinline__ float moe_act(float g, float u, float alpha, float limit) {
  if (limit <= 0) return g / (1.0f + expf(-g)) * u;
  g = fminf(g, limit);
  u = fminf(fmaxf(u, -limit), limit);
  return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
}

}  // namespace hearth::cuda
