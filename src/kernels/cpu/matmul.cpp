// Matmul driver on the CPU. PLACEHOLDER-FREE MINIMUM: F32/F16/BF16 rows dequantized then dotted
// in f32; the kernels owner replaces this with ISA-dispatched, quantized-activation kernels.
#include <stdexcept>
#include <vector>

#include "base/half.h"
#include "kernels/ops.h"

namespace hearth::kernels {

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: {
      const float* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    default:
      throw std::logic_error(std::string("dequantize_row: no kernel for ") + dtype_name(t));
  }
}

void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const int64_t d = w.rows(), n = w.cols();
  pool.parallel_for(d, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      dequantize_row(w.dtype, w.row(r), row.data(), n);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * n;
        float s = 0;
        for (int64_t i = 0; i < n; ++i) s += row[size_t(i)] * xt[i];
        y[t * d + r] = s;
      }
    }
  });
}

}  // namespace hearth::kernels
