// Non-owning tensor views. THE shape convention for all of Hearth: shapes are outermost-first
// (as in PyTorch/safetensors), rows are contiguous. A weight W of shape {d_out, d_in} holds d_out
// rows of d_in elements, so y = W x is one dot product per row. GGUF stores ne[] innermost-first;
// the GGUF reader reverses it once so nothing above formats/ ever sees ggml order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace hearth {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // outermost first
  const void* data = nullptr;  // points into a mapped file or an owned buffer
  uint64_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  uint64_t row_stride_bytes() const { return rows() ? nbytes / uint64_t(rows()) : 0; }
  const uint8_t* row(int64_t i) const {
    return static_cast<const uint8_t*>(data) + uint64_t(i) * row_stride_bytes();
  }
};

std::string shape_string(const std::vector<int64_t>& shape);  // "[32000, 4096]"

}  // namespace hearth
