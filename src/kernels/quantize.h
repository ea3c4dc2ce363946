// Quantizers: f32 rows -> any storable dtype, bit-compatible with ggml's reference quantizers
// (Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 byte-identical; K-quants use ggml's same search). Add a type in
// ref/quant-ref.h and the switch in cpu/quantize.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "base/thread-pool.h"
#include "tensor/dtype.h"

namespace hearth::kernels {

// Whether quantize_row can write dtype t.
bool can_quantize(DType t);

// src [n] f32 -> dst (row_bytes(t, n) bytes). n must be a multiple of t's block size.
Status quantize_row(DType t, const float* src, void* dst, int64_t n);

// src [rows, n] f32 -> dst, rows back to back; returns the bytes written. Runs the rows over
// `pool` when given (each row is independent, so the output does not depend on the split).
Result<size_t> quantize_rows(DType t, const float* src, void* dst, int64_t rows, int64_t n,
                             ThreadPool* pool = nullptr);

}  // namespace hearth::kernels
