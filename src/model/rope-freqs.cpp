// RoPE inverse frequencies with HF's scaling rules. Computed in double, stored as float, matching
// transformers' float32 inv_freq to the last bit in the unscaled case.
#include <cmath>

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

}  // namespace hearth
