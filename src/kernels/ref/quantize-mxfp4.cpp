// MXFP4 (quant-blocks.h BlockMxfp4): the reference quantizer and dequantizer. The scale rule is
// the OCP Microscaling spec's (shared exponent = floor(log2(amax)) - emax, emax = 2 for E2M1),
// which is also what ggml writes; every step is exact in float (powers of two).
#include <algorithm>
#include <cmath>

#include "kernels/quant-blocks.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels::ref {

namespace {

// The code of the value nearest v (v in units of the block's half-scale, so in [-12, 12] after
// saturation); ties go to the smaller magnitude. NaN becomes 0.
uint8_t nearest_mxfp4_code(float v) {
  const float a = std::fabs(v);
  int best = 0;
  float best_err = a;  // code 0
  for (int c = 1; c < 8; ++c) {
    const float err = std::fabs(a - float(kMxfp4Values[c]));
    if (err < best_err) best = c, best_err = err;
  }
  return uint8_t(best == 0 || !std::signbit(v) ? best : best | 8);
}

}  // namespace

void quantize_mxfp4(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockMxfp4*>(out);
  for (int64_t i = 0; i < n / kQK32; ++i, x += kQK32) {
    float amax = 0;
    for (int j = 0; j < kQK32; ++j) amax = std::max(amax, std::fabs(x[j]));
    int e = 0;
    if (amax > 0 && std::isfinite(amax)) {
      int exp2 = 0;
      std::frexp(amax, &exp2);  // amax = m * 2^exp2, m in [0.5, 1): floor(log2 amax) = exp2 - 1
      e = std::clamp(exp2 - 1 - 2 + 127, 0, 254);
    } else if (amax > 0) {
      e = 254;  // inf: the largest finite scale; the values saturate
    }
    y[i].e = uint8_t(e);
    // x / 2^(e - 128), exact (ldexp: 1 / 2^-128 itself would overflow a float).
    uint8_t codes[kQK32];
    for (int j = 0; j < kQK32; ++j) codes[j] = nearest_mxfp4_code(std::ldexp(x[j], 128 - e));
    for (int j = 0; j < kQK32 / 2; ++j) y[i].qs[j] = uint8_t(codes[j] | (codes[j + 16] << 4));
  }
}

void dequantize_mxfp4(const void* in, float* y, int64_t n) {
  const auto* w = static_cast<const BlockMxfp4*>(in);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const float d = mxfp4_scale(w[i].e);
    for (int j = 0; j < kQK32 / 2; ++j) {
      y[j] = float(kMxfp4Values[w[i].qs[j] & 0xF]) * d;
      y[j + 16] = float(kMxfp4Values[w[i].qs[j] >> 4]) * d;
    }
  }
}

}  // namespace hearth::kernels::ref
