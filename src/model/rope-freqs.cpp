// RoPE inverse frequencies with HF's scaling rules (linear, llama3, YaRN, LongRoPE). Computed in
// double, stored as float, matching transformers' float32 inv_freq to the last bit in the
// unscaled case.
#include <algorithm>
#include <cmath>

#include "base/half.h"
#include "base/printable.h"
#include "model/model.h"

namespace hearth {

std::vector<float> rope_inv_freq(int64_t head_dim, double theta, const std::string& scaling,
                                 double factor, double low_freq_factor, double high_freq_factor,
                                 int64_t original_context) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    // transformers: 1 / theta ** (arange(0, dim, 2).float() / dim), in float32.
    const float exponent = float(2 * i) / float(head_dim);
    double f = 1.0 / std::pow(theta, double(exponent));
    if (scaling == "linear" && factor > 0) {
      f /= factor;
    } else if (scaling == "llama3" && factor > 0 && original_context > 0) {
      const double low_wavelen = double(original_context) / low_freq_factor;
      const double high_wavelen = double(original_context) / high_freq_factor;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (double(original_context) / wavelen - low_freq_factor) /
                              (high_freq_factor - low_freq_factor);
        f = (1.0 - smooth) * f / factor + smooth * f;
      }
    }
    inv[size_t(i)] = float(f);
  }
  return inv;
}

namespace {
// transformers' `arange(0, dim, 2).float() / dim` exponent of pair i.
double pair_exponent(int64_t i, int64_t n_rot) {
  return double(float(2 * i) / float(n_rot));
}
}  // namespace

RopeTable yarn_rope_table(int64_t n_rot, const YarnParams& y) {
  const int64_t half = n_rot / 2;
  const double base = y.theta;
  const double ctx = double(y.original_context);
  // The pair index whose wavelength fits `rotations` turns into the original context.
  auto correction_dim = [&](double rotations) {
    return double(n_rot) * std::log(ctx / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
  };
  double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(n_rot - 1));
  if (low == high) high += 0.001;  // no division by zero in the ramp
  RopeTable t;
  t.inv_freq.resize(size_t(half));
  for (int64_t i = 0; i < half; ++i) {
    const double extrapolation = 1.0 / std::pow(base, pair_exponent(i, n_rot));
    const double interpolation = extrapolation / y.factor;
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double keep = 1.0 - ramp;  // share of the unscaled (extrapolated) frequency
    t.inv_freq[size_t(i)] = float(interpolation * (1.0 - keep) + extrapolation * keep);
  }
  auto mscale_of = [](double scale, double m) {
    return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
  };
  if (y.attention_factor > 0)
    t.mscale = float(y.attention_factor);
  else if (y.mscale > 0 && y.mscale_all_dim > 0)
    t.mscale = float(mscale_of(y.factor, y.mscale) / mscale_of(y.factor, y.mscale_all_dim));
  else
    t.mscale = float(mscale_of(y.factor, 1.0));
  return t;
}

RopeTable longrope_table(int64_t n_rot, double theta, const std::vector<float>& short_factor,
                         const std::vector<float>& long_factor, double attention_factor,
                         int64_t context, int64_t original_context) {
  const int64_t half = n_rot / 2;
  auto table = [&](const std::vector<float>& ext) {
    std::vector<float> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i)
      inv[size_t(i)] =
          float(1.0 / (double(ext[size_t(i)]) * std::pow(theta, pair_exponent(i, n_rot))));
    return inv;
  };
  RopeTable t;
  t.inv_freq = table(short_factor);
  t.inv_freq_long = table(long_factor);
  double factor = attention_factor;
  if (!(factor > 0)) {
    const double scale = original_context > 0 ? double(context) / double(original_context) : 1.0;
    factor =
        scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(double(original_context)));
  }
  // transformers applies the factor whichever table is in use; so does llama.cpp.
  t.mscale = t.mscale_long = float(factor);
  t.long_beyond = original_context;
  return t;
}

Status round_rope_freqs(RopeTable& t, const std::string& type) {
  if (type == "f32") return Status::ok();
  if (type != "bf16" && type != "f16")
    return Status::error("RoPE frequency type '" + printable(type, 80) +
                         "' is not supported (f32, bf16, f16)");
  for (auto* v : {&t.inv_freq, &t.inv_freq_long})
    for (float& x : *v)
      x = type == "bf16" ? bf16_to_f32(f32_to_bf16(x)) : fp16_to_f32(f32_to_fp16(x));
  return Status::ok();
}

}  // namespace hearth
