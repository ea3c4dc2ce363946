// Per-tensor work shared by convert and quantize: decode any stored dtype to f32, permute Q/K
// rows into llama.cpp's RoPE layout, encode f32 into the output dtype, and the streaming loop
// that writes the tensors one at a time with progress.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread-pool.h"
#include "formats/gguf.h"
#include "runtime/convert/convert.h"
#include "runtime/convert/quant-plan.h"
#include "tensor/tensor-view.h"

namespace hearth::convert {

// t (F32, F16, BF16 or a quantized type with a dequantizer) -> out [numel] f32.
Status decode_to_f32(const TensorView& t, std::vector<float>& out);

// f32 [rows, cols] -> bytes of dtype `type` (rows back to back), rows split over `pool`.
Status encode_from_f32(DType type, const float* src, int64_t rows, int64_t cols,
                       std::vector<uint8_t>& out, ThreadPool* pool);

// llama.cpp's converter stores the Q and K projections of "llama" models with each head's rows
// reordered from HF's halves layout (x[i], x[i+d/2]) to adjacent pairs (x[2i], x[2i+1]), which
// is what its RoPE rotates. w [n_head * head_dim, cols] f32, in place.
Status permute_for_interleaved_rope(std::vector<float>& w, int64_t rows, int64_t cols,
                                    int64_t n_head);

// Writes output tensor `index` (described by `info`) to `out`; `pool` is for encode_from_f32.
using WriteTensorFn = std::function<Status(size_t index, const GgufTensorInfo& info,
                                           ThreadPool& pool, GgufTensorStream& out)>;

// Streams `w`'s declared tensors to `out_path` in order, one in memory at a time, reporting each
// to `progress`; `choices[i]` is tensor i's type choice (a fallback shows in the progress line).
// n_threads <= 0: all hardware threads.
Status write_tensors(const GgufWriter& w, const std::string& out_path,
                     const std::vector<TypeChoice>& choices, int n_threads,
                     const ConvertProgressFn& progress, const WriteTensorFn& write_tensor);

}  // namespace hearth::convert
