// Rotary position embedding on the CPU, both pair layouts (see RopeStyle), full or partial
// (rope_partial). The cos/sin of every (token, frequency) is computed once and reused for Q, K
// and every layer of the pass.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/small-ops.h"

namespace hearth::kernels {

namespace {

// cos/sin for the positions and frequencies of the last call on this thread. A forward pass
// calls rope twice per layer with the same positions: 2 x n_layers calls share one table.
// Keyed on the values (not the pointers), so another model or pass can never reuse stale angles.
struct AngleTable {
  std::vector<int32_t> pos;
  std::vector<float> inv_freq;
  std::vector<float> cs;  // [T][half][cos, sin]
};

const float* angles(const int32_t* pos, int64_t n_tokens, const float* inv_freq, int64_t half) {
  thread_local AngleTable tab;
  const bool same = int64_t(tab.pos.size()) == n_tokens && int64_t(tab.inv_freq.size()) == half &&
                    std::equal(pos, pos + n_tokens, tab.pos.begin()) &&
                    std::equal(inv_freq, inv_freq + half, tab.inv_freq.begin());
  if (!same) {
    tab.pos.assign(pos, pos + n_tokens);
    tab.inv_freq.assign(inv_freq, inv_freq + half);
    tab.cs.resize(size_t(n_tokens * half * 2));
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t i = 0; i < half; ++i) {
        // Angles in double: at position 4000+ float angle error would show in the logits.
        const double angle = double(pos[t]) * double(inv_freq[i]);
        tab.cs[size_t((t * half + i) * 2)] = float(std::cos(angle));
        tab.cs[size_t((t * half + i) * 2 + 1)] = float(std::sin(angle));
      }
  }
  return tab.cs.data();
}

// Rotates the first n_rot dims of each head (all of them unless partial), scaling them by mscale.
void rotate(float* x, int64_t t0, int64_t t1, int64_t n_heads, int64_t head_dim, int64_t n_rot,
            const float* cs, RopeStyle style, float mscale) {
  const int64_t half = n_rot / 2;
  for (int64_t t = t0; t < t1; ++t) {
    const float* ct = cs + t * half * 2;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      if (style == RopeStyle::kInterleaved) {
        for (int64_t i = 0; i < half; ++i) {
          const float c = ct[2 * i] * mscale, s = ct[2 * i + 1] * mscale;
          const float x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * c - x1 * s;
          v[2 * i + 1] = x0 * s + x1 * c;
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float c = ct[2 * i] * mscale, s = ct[2 * i + 1] * mscale;
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * c - x1 * s;
          v[i + half] = x0 * s + x1 * c;
        }
      }
    }
  }
}

}  // namespace

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style) {
  rope_partial(x, n_tokens, n_heads, head_dim, head_dim, pos, inv_freq, style, 1.0f);
}

void rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                  const int32_t* pos, const float* inv_freq, RopeStyle style, float mscale) {
  if (n_tokens <= 0) return;
  const float* cs = angles(pos, n_tokens, inv_freq, n_rot / 2);
  rotate(x, 0, n_tokens, n_heads, head_dim, n_rot, cs, style, mscale);
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style, ThreadPool& pool) {
  rope_partial(x, n_tokens, n_heads, head_dim, head_dim, pos, inv_freq, style, 1.0f, pool);
}

void rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                  const int32_t* pos, const float* inv_freq, RopeStyle style, float mscale,
                  ThreadPool& pool) {
  if (n_tokens <= 0) return;
  const float* cs = angles(pos, n_tokens, inv_freq, n_rot / 2);  // on the caller's thread
  if (n_tokens * n_heads * head_dim < (int64_t(1) << 16) || pool.size() == 1)
    return rotate(x, 0, n_tokens, n_heads, head_dim, n_rot, cs, style, mscale);
  pool.parallel_for(n_tokens, 1, [&](int64_t b, int64_t e) {
    rotate(x, b, e, n_heads, head_dim, n_rot, cs, style, mscale);
  });
}

}  // namespace hearth::kernels
