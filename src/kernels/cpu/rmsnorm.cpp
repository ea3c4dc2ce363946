// RMSNorm on the CPU. Accumulates in double: rows are short (<= 16k) and this keeps the golden
// logits within 1e-4 regardless of summation order. Loops are SmallOps (per ISA).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/small-ops.h"

namespace hearth::kernels {

namespace {
void rows_range(const SmallOps& ops, const float* x, const float* w, float* y, int64_t r0,
                int64_t r1, int64_t n, float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const double ss = ops.sum_squares(x + r * n, n);
    const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    ops.scale_mul(x + r * n, scale, w, y + r * n, n);
  }
}
}  // namespace

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps) {
  rows_range(small_ops(), x, w, y, 0, rows, n, eps);
}

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps,
             ThreadPool& pool) {
  const SmallOps& ops = small_ops();
  // A row is a few microseconds: split only when each thread gets 64k+ elements.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, n));
  if (rows < 2 * grain || pool.size() == 1) return rows_range(ops, x, w, y, 0, rows, n, eps);
  pool.parallel_for(rows, grain,
                    [&](int64_t b, int64_t e) { rows_range(ops, x, w, y, b, e, n, eps); });
}

}  // namespace hearth::kernels
