// RMSNorm on the CPU. Accumulates in double: rows are short (<= 16k) and this keeps the golden
// logits within 1e-4 regardless of summation order.
#include <cmath>

#include "kernels/ops.h"

namespace hearth::kernels {

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w[i];
  }
}

}  // namespace hearth::kernels
