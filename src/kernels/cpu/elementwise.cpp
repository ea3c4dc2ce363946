// Element-wise ops on the CPU: SwiGLU, GELU-tanh gated, clamped SwiGLU (gpt-oss), residual add,
// bias add, soft-cap, scale, softmax. The loops are SmallOps
// (per ISA: SwiGLU's exp is vectorised); the pooled versions split large (prefill) calls.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/small-ops.h"

namespace hearth::kernels {

namespace {
// Below this many elements a hand-off to the pool costs more than it saves (a decode step's
// SwiGLU is ~6k elements, ~1 us on one core; a hand-off is about as long).
constexpr int64_t kParallelElements = 1 << 16;

template <typename Body>
void split(int64_t n, ThreadPool& pool, Body&& body) {
  if (n < kParallelElements || pool.size() == 1) return body(0, n);
  // Chunks on 16-float (one cache line) boundaries: no two threads write one line.
  pool.parallel_for((n + 15) / 16, 1024,
                    [&](int64_t b, int64_t e) { body(b * 16, std::min(n, e * 16)); });
}
}  // namespace

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  small_ops().swiglu(gate, up, out, n);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, ThreadPool& pool) {
  const SmallOps& ops = small_ops();
  split(n, pool, [&](int64_t b, int64_t e) { ops.swiglu(gate + b, up + b, out + b, e - b); });
}

namespace {
// One generic loop for every table (x86 and ARM alike): only Gemma's FFN runs it.
void gelu_tanh_gated_range(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float inner = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    out[i] = 0.5f * g * (1.0f + std::tanh(inner)) * up[i];
  }
}
}  // namespace

void gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n) {
  gelu_tanh_gated_range(gate, up, out, n);
}

void gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n, ThreadPool& pool) {
  split(n, pool,
        [&](int64_t b, int64_t e) { gelu_tanh_gated_range(gate + b, up + b, out + b, e - b); });
}

namespace {
// One generic loop for every table: only gpt-oss's experts run it, over a few rows each.
void swiglu_clamped_range(const float* gate, const float* up, float* out, int64_t n, float alpha,
                          float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
  }
}
}  // namespace

void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha,
                    float limit) {
  swiglu_clamped_range(gate, up, out, n, alpha, limit);
}

void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha,
                    float limit, ThreadPool& pool) {
  split(n, pool, [&](int64_t b, int64_t e) {
    swiglu_clamped_range(gate + b, up + b, out + b, e - b, alpha, limit);
  });
}

void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add_inplace(float* y, const float* x, int64_t n) {
  small_ops().add(y, x, n);
}

void add_inplace(float* y, const float* x, int64_t n, ThreadPool& pool) {
  const SmallOps& ops = small_ops();
  split(n, pool, [&](int64_t b, int64_t e) { ops.add(y + b, x + b, e - b); });
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t n) {
  const SmallOps& ops = small_ops();
  for (int64_t r = 0; r < rows; ++r) ops.add(y + r * n, bias, n);
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace hearth::kernels
