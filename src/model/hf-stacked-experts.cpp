// De-interleaving and transposing gpt-oss's stacked HF experts (hf-stacked-experts.h).
#include "model/hf-stacked-experts.h"

#include <cstring>

#include "base/half.h"

namespace hearth {

namespace {

Result<size_t> float_element_size(const TensorView& t) {
  switch (t.dtype) {
    case DType::F32:
      return size_t(4);
    case DType::F16:
    case DType::BF16:
      return size_t(2);
    default:
      return Status::error("tensor " + t.name + ": dtype " + dtype_name(t.dtype) +
                           " is not a float type (F32, F16, BF16)");
  }
}

float element_f32(const TensorView& t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  if (t.dtype == DType::F32) {
    float f;
    std::memcpy(&f, p + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + i * 2, 2);
  return t.dtype == DType::BF16 ? bf16_to_f32(h) : fp16_to_f32(h);
}

}  // namespace

Status stacked_expert_matrix(const TensorView& stacked, int64_t e, StackedExpertPart part,
                             std::vector<uint8_t>& out) {
  HEARTH_ASSIGN_OR_RETURN(const size_t es, float_element_size(stacked));
  const int64_t in = stacked.shape[1], cols = stacked.shape[2];
  // Stored [in, cols] for x @ W; Hearth wants [d_out, in]: out row r is column c(r) of W.
  const bool gate_up = part != StackedExpertPart::kDown;
  const int64_t d_out = gate_up ? cols / 2 : cols;
  const int64_t stride = gate_up ? 2 : 1, offset = part == StackedExpertPart::kUp ? 1 : 0;
  out.resize(size_t(d_out * in) * es);
  const auto* src = static_cast<const uint8_t*>(stacked.data) + size_t(e * in * cols) * es;
  for (int64_t r = 0; r < d_out; ++r) {
    const int64_t c = r * stride + offset;
    for (int64_t i = 0; i < in; ++i)
      std::memcpy(out.data() + size_t(r * in + i) * es, src + size_t(i * cols + c) * es, es);
  }
  return Status::ok();
}

Status stacked_expert_bias(const TensorView& stacked, int64_t e, StackedExpertPart part,
                           std::vector<float>& out) {
  HEARTH_TRY(float_element_size(stacked).status());
  const int64_t cols = stacked.shape[1];
  const bool gate_up = part != StackedExpertPart::kDown;
  const int64_t n = gate_up ? cols / 2 : cols;
  const int64_t stride = gate_up ? 2 : 1, offset = part == StackedExpertPart::kUp ? 1 : 0;
  out.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    out[size_t(i)] = element_f32(stacked, e * cols + i * stride + offset);
  return Status::ok();
}

}  // namespace hearth
