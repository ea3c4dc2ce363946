// Float64 building blocks for the forward passes tests write from a family's definition
// (transformers' modeling code), independent of the engine: matvec, RMSNorm (plain or Gemma's
// 1 + w), rotate-half RoPE over the first rot dims of each head, causal softmax attention with
// an optional window. Header-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hearth::test::ref64 {

using Vec = std::vector<double>;

// w [rows, x.size()] row-major times x.
inline Vec matvec(const float* w, const Vec& x, int64_t rows) {
  Vec y(static_cast<size_t>(rows), 0.0);
  const int64_t cols = int64_t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[size_t(r)] += double(w[r * cols + c]) * x[size_t(c)];
  return y;
}

// out[0..n) = x / rms(x) * (offset + w): offset 0 (Llama, Phi-3) or 1 (Gemma). out may be x.
inline void rms_norm(const double* x, int64_t n, const float* w, double eps, double offset,
                     double* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double s = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s * (offset + double(w[i]));
}
inline Vec rms_norm(const Vec& x, const float* w, double eps, double offset) {
  Vec y(x.size());
  rms_norm(x.data(), int64_t(x.size()), w, eps, offset, y.data());
  return y;
}

// rotate_half RoPE at position pos on the first rot dims of a head of head_dim (the rest pass
// through): pair i < rot / 2 is (i, i + rot / 2), angle pos * inv_freq[i], cos and sin scaled
// by mscale (LongRoPE's and YaRN's attention factor).
inline void rope_halves(double* head, int64_t rot, const Vec& inv_freq, int64_t pos,
                        double mscale = 1.0) {
  const int64_t half = rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double c = std::cos(double(pos) * inv_freq[size_t(i)]) * mscale;
    const double s = std::sin(double(pos) * inv_freq[size_t(i)]) * mscale;
    const double a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = a * s + b * c;
  }
}

// The attention output [n_heads * hd] of query position t over keys [first, t]: q[t], k[j],
// v[j] hold n_heads (n_kv_heads) heads of hd; scores times `scale`.
inline Vec causal_attention(const std::vector<Vec>& q, const std::vector<Vec>& k,
                            const std::vector<Vec>& v, int64_t t, int64_t first, int64_t n_heads,
                            int64_t n_kv_heads, int64_t hd, double scale) {
  Vec out(static_cast<size_t>(n_heads * hd), 0.0);
  for (int64_t h = 0; h < n_heads; ++h) {
    const int64_t kh = h / (n_heads / n_kv_heads);
    Vec s;
    double mx = -1e300;
    for (int64_t j = first; j <= t; ++j) {
      double d = 0;
      for (int64_t i = 0; i < hd; ++i)
        d += q[size_t(t)][size_t(h * hd + i)] * k[size_t(j)][size_t(kh * hd + i)];
      s.push_back(d * scale);
      mx = std::max(mx, s.back());
    }
    double z = 0;
    for (double& e : s) z += (e = std::exp(e - mx));
    for (int64_t j = first; j <= t; ++j)
      for (int64_t i = 0; i < hd; ++i)
        out[size_t(h * hd + i)] += s[size_t(j - first)] / z * v[size_t(j)][size_t(kh * hd + i)];
  }
  return out;
}

}  // namespace hearth::test::ref64
