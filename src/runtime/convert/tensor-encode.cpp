// Decode / encode / permute for one tensor at a time (the unit of streaming). Dequantization uses
// the kernels' per-row dequantizer; encoding uses the reference quantizers (ggml bit-compatible).
#include "runtime/convert/tensor-encode.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "base/half.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "model/weight-transcode.h"

namespace hearth::convert {

Status decode_to_f32(const TensorView& t, std::vector<float>& out) {
  const int64_t n = t.numel();
  const int64_t rows = t.rows(), cols = t.cols();
  const auto rb = row_bytes(t.dtype, uint64_t(cols));
  if (!rb || *rb * uint64_t(rows) != t.nbytes)
    return Status::error("tensor " + t.name + ": " + std::to_string(t.nbytes) +
                         " bytes do not match shape " + shape_string(t.shape) + " of " +
                         dtype_name(t.dtype));
  out.resize(size_t(n));
  const auto* src = static_cast<const uint8_t*>(t.data);
  switch (t.dtype) {
    case DType::F32:
      std::memcpy(out.data(), src, size_t(n) * 4);
      return Status::ok();
    case DType::F16:
    case DType::BF16: {
      const bool bf = t.dtype == DType::BF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[size_t(i)] = bf ? bf16_to_f32(h) : fp16_to_f32(h);
      }
      return Status::ok();
    }
    default:
      break;
  }
  // A type the loader rewrites into another (Q3_K as Q6_K: model/weight-transcode.h) decodes a
  // row at a time through that type, which holds its values exactly.
  const std::optional<DType> via = transcode_target(t.dtype);
  if (!via && !dtype_info(t.dtype).runnable)
    return Status::error("tensor " + t.name + ": cannot decode type " + dtype_name(t.dtype));
  try {
    // (row_bytes above checked that cols is whole blocks of t.dtype)
    const int64_t blocks = cols / int64_t(dtype_info(t.dtype).block_size);
    std::vector<uint8_t> row(via ? size_t(blocks) * dtype_info(*via).block_bytes : 0);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* in = src + uint64_t(r) * *rb;
      if (via) transcode(t.dtype, in, row.data(), blocks);
      kernels::dequantize_row(via.value_or(t.dtype), via ? row.data() : in, out.data() + r * cols,
                              cols);
    }
  } catch (const std::exception& e) {
    return Status::error("tensor " + t.name + ": " + e.what());
  }
  return Status::ok();
}

Status encode_from_f32(DType type, const float* src, int64_t rows, int64_t cols,
                       std::vector<uint8_t>& out, ThreadPool* pool) {
  const auto rb = row_bytes(type, uint64_t(cols));
  if (!rb)
    return Status::error(std::string("row length ") + std::to_string(cols) +
                         " is not a multiple of the " + dtype_name(type) + " block size");
  out.resize(size_t(*rb * uint64_t(rows)));
  HEARTH_ASSIGN_OR_RETURN(size_t written,
                          kernels::quantize_rows(type, src, out.data(), rows, cols, pool));
  if (written != out.size())
    return Status::error(std::string("quantizer wrote ") + std::to_string(written) +
                         " bytes, expected " + std::to_string(out.size()));
  return Status::ok();
}

Status permute_for_interleaved_rope(std::vector<float>& w, int64_t rows, int64_t cols,
                                    int64_t n_head) {
  if (n_head <= 0 || rows % n_head != 0 || (rows / n_head) % 2 != 0)
    return Status::error("cannot split " + std::to_string(rows) + " rows into " +
                         std::to_string(n_head) + " heads of even size");
  const int64_t hd = rows / n_head, half = hd / 2;
  std::vector<float> head(size_t(hd * cols));
  for (int64_t h = 0; h < n_head; ++h) {
    float* base = w.data() + h * hd * cols;
    std::memcpy(head.data(), base, head.size() * sizeof(float));
    // Output row 2i + j takes input row j * half + i (reshape [2, half] -> swap -> [half, 2]).
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(base + (2 * i + j) * cols, head.data() + (j * half + i) * cols,
                    size_t(cols) * sizeof(float));
  }
  return Status::ok();
}

Status write_tensors(const GgufWriter& w, const std::string& out_path,
                     const std::vector<TypeChoice>& choices, int n_threads,
                     const ConvertProgressFn& progress, const WriteTensorFn& write_tensor) {
  HEARTH_ASSIGN_OR_RETURN(GgufTensorStream stream, w.open_stream(out_path));
  const std::vector<GgufTensorInfo>& infos = stream.tensors();
  if (choices.size() != infos.size())
    return Status::error(out_path + ": " + std::to_string(choices.size()) + " type choices for " +
                         std::to_string(infos.size()) + " tensors");
  uint64_t total = 0, done = 0;
  for (const auto& t : infos) total += t.nbytes;

  ThreadPool pool(n_threads > 0 ? n_threads
                                : int(std::max(1u, std::thread::hardware_concurrency())));
  for (size_t i = 0; i < infos.size(); ++i) {
    const GgufTensorInfo& info = infos[i];
    HEARTH_TRY(write_tensor(i, info, pool, stream));
    done += info.nbytes;
    if (progress) {
      std::string type_text = dtype_name(info.dtype);
      if (choices[i].fell_back)
        type_text += std::string(" (row ") + std::to_string(info.shape.back()) + " does not fit " +
                     dtype_name(choices[i].preferred) + ")";
      progress({int64_t(i), int64_t(infos.size()), info.name, type_text, shape_string(info.shape),
                done, total});
    }
  }
  return stream.finish();
}

}  // namespace hearth::convert
