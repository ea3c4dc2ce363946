// Scalar float64 references of the forward pass's small ops, straight from their definitions:
// the truth the CPU tables (and through them every backend) are tested against. They favour
// obviousness over speed. Adding an op: its reference here, next to its ops.h declaration.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace hearth::kernels::ref {

// ops.h attention with an AttentionMask: every visible key scored in double, capped, softmaxed
// (with the head's sink logit in the denominator when mask.sinks is set).
std::vector<float> attention(const float* q, const float* k_cache, const float* v_cache,
                             int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                             int64_t head_dim, double scale, const AttentionMask& mask);

// ops.h rope_partial on a copy of x [T, n_heads, head_dim].
std::vector<float> rope_partial(const float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                int64_t n_rot, const int32_t* pos, const float* inv_freq,
                                RopeStyle style, double mscale);

// gelu_tanh(gate) * up, and cap * tanh(x / cap), element by element.
std::vector<float> gelu_tanh_gated(const float* gate, const float* up, int64_t n);
std::vector<float> softcap(const float* x, int64_t n, double cap);
// gpt-oss's clamped SwiGLU (ops.h swiglu_clamped) in double.
std::vector<float> swiglu_clamped(const float* gate, const float* up, int64_t n, double alpha,
                                  double limit);

// x / sqrt(mean(x^2) + eps) * w for each of `rows` rows of n (per-head norms: rows = T * heads).
std::vector<float> rmsnorm(const float* x, const float* w, int64_t rows, int64_t n, double eps);

}  // namespace hearth::kernels::ref
