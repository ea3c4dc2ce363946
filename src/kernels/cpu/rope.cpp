// Rotary position embedding on the CPU, both pair layouts (see RopeStyle).
#include <cmath>

#include "kernels/ops.h"

namespace hearth::kernels {

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // Angles in double: at position 4000+ float angle error would show in the logits.
      const double angle = double(pos[t]) * double(inv_freq[i]);
      const float c = float(std::cos(angle)), s = float(std::sin(angle));
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * head_dim;
        const int64_t a = style == RopeStyle::kInterleaved ? 2 * i : i;
        const int64_t b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace hearth::kernels
