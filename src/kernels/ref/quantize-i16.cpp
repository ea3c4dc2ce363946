// Reference int16 block quantizer for activations (quant-ref.h quantize_i16_blocks): the bits the
// AVX-512 Q8_0 and Q6_K packed GEMMs' activation quantizers must reproduce
// (tests/ops/packed-test.cpp).
#include <algorithm>
#include <cmath>

#include "kernels/ref/quant-ref.h"

namespace hearth::kernels::ref {

void quantize_i16_blocks(const float* x, int16_t* q, float* d, int64_t n, int32_t max_code) {
  constexpr int64_t kBlock = 32;
  for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock, q += kBlock) {
    float amax = 0.f;
    for (int64_t j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float dd = amax / float(max_code);
    const float id = dd != 0.f ? 1.f / dd : 0.f;
    d[b] = dd;
    for (int64_t j = 0; j < kBlock; ++j) {
      const float v = x[j] * id;
      // Ties to even, whatever the caller's rounding mode (the SIMD quantizer says so in its
      // instruction); |v| <= max_code up to one rounding, so the clamp only meets non-finite
      // input.
      const float r =
          v == v ? std::clamp(v - std::remainder(v, 1.0f), -float(max_code), float(max_code)) : 0.f;
      q[j] = int16_t(r);
    }
  }
}

}  // namespace hearth::kernels::ref
