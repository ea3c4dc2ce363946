// The gated activations of an FFN, act(gate) * up, as one definition for every kernel that
// computes them (elementwise.cu's plain and split forms, fused.cu's int8 epilogue), so fused and
// unfused outputs agree bit for bit.
#pragma once

namespace hearth::cuda {

// SwiGLU: silu(g) * u.
struct SiluGate {
  __device__ __forceinline__ float operator()(float g, float u) const {
    return g / (1.0f + expf(-g)) * u;
  }
};

// PyTorch's gelu(approximate="tanh") of g, times u (ops.h gelu_tanh_gated).
struct GeluTanhGate {
  __device__ __forceinline__ float operator()(float g, float u) const {
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);  // sqrt(2/pi)
    return 0.5f * g * (1.0f + tanhf(inner)) * u;
  }
};

}  // namespace hearth::cuda
