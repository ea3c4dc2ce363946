// The float64 references of ops-ref.h.
#include "kernels/ref/ops-ref.h"

#include <algorithm>
#include <cmath>

namespace hearth::kernels::ref {

std::vector<float> attention(const float* q, const float* k, const float* v, int64_t T,
                             int64_t pos0, int64_t H, int64_t Hkv, int64_t hd, double scale,
                             const AttentionMask& mask) {
  std::vector<float> out(static_cast<size_t>(T * H * hd));
  const int64_t group = H / Hkv, stride = Hkv * hd;
  auto row = [&](int64_t p) { return mask.ring_rows > 0 ? p % mask.ring_rows : p; };
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t last = pos0 + t, kvh = h / group;
      const int64_t first = mask.window > 0 ? std::max<int64_t>(0, last - mask.window + 1) : 0;
      std::vector<double> s;
      double mx = -1e300;
      for (int64_t p = first; p <= last; ++p) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i)
          d += double(q[(t * H + h) * hd + i]) * k[row(p) * stride + kvh * hd + i];
        d *= scale;
        if (mask.softcap > 0) d = mask.softcap * std::tanh(d / mask.softcap);
        s.push_back(d);
        mx = std::max(mx, d);
      }
      // A sink logit joins the denominator (and the max) with no value row.
      if (mask.sinks) mx = std::max(mx, double(mask.sinks[h]));
      double l = mask.sinks ? std::exp(double(mask.sinks[h]) - mx) : 0.0;
      for (double& x : s) l += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t p = first; p <= last; ++p)
          o += s[size_t(p - first)] * v[row(p) * stride + kvh * hd + i];
        out[size_t((t * H + h) * hd + i)] = float(o / l);
      }
    }
  return out;
}

std::vector<float> rope_partial(const float* x, int64_t T, int64_t H, int64_t hd, int64_t n_rot,
                                const int32_t* pos, const float* inv_freq, RopeStyle style,
                                double mscale) {
  std::vector<float> y(x, x + T * H * hd);
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double a = double(pos[t]) * double(inv_freq[i]);
        float* r = y.data() + (t * H + h) * hd;
        const int64_t ia = style == RopeStyle::kInterleaved ? 2 * i : i;
        const int64_t ib = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
        const double x0 = r[ia], x1 = r[ib];
        r[ia] = float((x0 * std::cos(a) - x1 * std::sin(a)) * mscale);
        r[ib] = float((x0 * std::sin(a) + x1 * std::cos(a)) * mscale);
      }
  return y;
}

std::vector<float> gelu_tanh_gated(const float* gate, const float* up, int64_t n) {
  std::vector<float> out(size_t(std::max<int64_t>(n, 0)));
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[size_t(i)] = float(0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g))) * up[i]);
  }
  return out;
}

std::vector<float> swiglu_clamped(const float* gate, const float* up, int64_t n, double alpha,
                                  double limit) {
  std::vector<float> out(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) {
    const double g = std::min(double(gate[i]), limit);
    const double u = std::clamp(double(up[i]), -limit, limit);
    out[size_t(i)] = float((u + 1.0) * g / (1.0 + std::exp(-alpha * g)));
  }
  return out;
}

std::vector<float> softcap(const float* x, int64_t n, double cap) {
  std::vector<float> out(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = float(cap * std::tanh(double(x[i]) / cap));
  return out;
}

std::vector<float> rmsnorm(const float* x, const float* w, int64_t rows, int64_t n, double eps) {
  std::vector<float> out(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
    const double s = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) out[size_t(r * n + i)] = float(x[r * n + i] * s * w[i]);
  }
  return out;
}

}  // namespace hearth::kernels::ref
