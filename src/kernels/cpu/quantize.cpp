// quantize_row / quantize_rows: the public quantizer entry points (kernels/quantize.h) over the
// reference quantizers. Adding a type = one case in quantizer_for().
#include "kernels/quantize.h"

#include <cstring>

#include "kernels/ref/quant-ref.h"

namespace hearth::kernels {

namespace {

void copy_f32(const float* x, void* y, int64_t n) {
  std::memcpy(y, x, size_t(n) * 4);
}

using QuantizeRowFn = void (*)(const float*, void*, int64_t);

QuantizeRowFn quantizer_for(DType t) {
  switch (t) {
    case DType::F32:
      return copy_f32;
    case DType::F16:
      return ref::quantize_f16;
    case DType::BF16:
      return ref::quantize_bf16;
    case DType::Q4_0:
      return ref::quantize_q4_0;
    case DType::Q4_1:
      return ref::quantize_q4_1;
    case DType::Q5_0:
      return ref::quantize_q5_0;
    case DType::Q5_1:
      return ref::quantize_q5_1;
    case DType::Q8_0:
      return ref::quantize_q8_0;
    case DType::Q8_1:
      return ref::quantize_q8_1;
    case DType::Q4_K:
      return ref::quantize_q4_k;
    case DType::Q5_K:
      return ref::quantize_q5_k;
    case DType::Q6_K:
      return ref::quantize_q6_k;
    case DType::Q8_K:
      return ref::quantize_q8_k;
    case DType::MXFP4:
      return ref::quantize_mxfp4;
    default:
      return nullptr;
  }
}

Result<uint64_t> checked_row_bytes(DType t, int64_t n) {
  if (!dtype_info(uint32_t(t)))
    return Status::error("quantize: unknown dtype id " + std::to_string(uint32_t(t)));
  if (!quantizer_for(t))
    return Status::error(std::string("quantize: cannot write dtype ") + dtype_name(t));
  if (n < 0) return Status::error("quantize: negative row length " + std::to_string(n));
  const auto bytes = row_bytes(t, uint64_t(n));
  if (!bytes)
    return Status::error(std::string("quantize: row length ") + std::to_string(n) +
                         " is not a multiple of the " + dtype_name(t) + " block size " +
                         std::to_string(dtype_info(t).block_size));
  return *bytes;
}

}  // namespace

bool can_quantize(DType t) {
  return dtype_info(uint32_t(t)) && quantizer_for(t) != nullptr;
}

Status quantize_row(DType t, const float* src, void* dst, int64_t n) {
  HEARTH_ASSIGN_OR_RETURN(uint64_t bytes, checked_row_bytes(t, n));
  (void)bytes;
  quantizer_for(t)(src, dst, n);
  return Status::ok();
}

Result<size_t> quantize_rows(DType t, const float* src, void* dst, int64_t rows, int64_t n,
                             ThreadPool* pool) {
  HEARTH_ASSIGN_OR_RETURN(uint64_t bytes, checked_row_bytes(t, n));
  if (rows < 0) return Status::error("quantize: negative row count " + std::to_string(rows));
  if (rows > 0 && bytes > SIZE_MAX / uint64_t(rows))
    return Status::error("quantize: " + std::to_string(rows) + " rows overflow the output size");
  const QuantizeRowFn fn = quantizer_for(t);
  auto* out = static_cast<uint8_t*>(dst);
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(src + r * n, out + uint64_t(r) * bytes, n);
  };
  if (pool)
    pool->parallel_for(rows, 1, body);
  else
    body(0, rows);
  return size_t(bytes * uint64_t(rows));
}

}  // namespace hearth::kernels
