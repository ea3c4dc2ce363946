// Random weight bytes of any runnable dtype with ggml's block layout (quant bytes random, fp16
// scale fields set to sane magnitudes so values stay finite). Used by the CUDA tests and bench.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "tensor/dtype.h"

namespace hearth::test {

inline std::vector<uint8_t> random_weight_bytes(DType t, int64_t rows, int64_t cols,
                                                uint32_t seed) {
  const DTypeInfo& info = dtype_info(t);
  const size_t n_blocks = size_t(rows) * size_t(cols) / info.block_size;
  std::vector<uint8_t> bytes(n_blocks * info.block_bytes);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1.f, 1.f), scale(0.002f, 0.02f);
  auto put16 = [&](size_t at, uint16_t v) {
    bytes[at] = uint8_t(v & 0xff);
    bytes[at + 1] = uint8_t(v >> 8);
  };
  if (t == DType::F32) {
    for (size_t i = 0; i < n_blocks; ++i) {
      const float f = val(rng);
      std::memcpy(&bytes[i * 4], &f, 4);
    }
    return bytes;
  }
  if (t == DType::F16 || t == DType::BF16) {
    for (size_t i = 0; i < n_blocks; ++i)
      put16(i * 2, t == DType::F16 ? f32_to_fp16(val(rng)) : f32_to_bf16(val(rng)));
    return bytes;
  }
  for (auto& b : bytes) b = uint8_t(rng());
  std::vector<int> scale_offsets;
  switch (t) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
      scale_offsets = {0};
      break;
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      scale_offsets = {0, 2};
      break;
    case DType::Q6_K:
      scale_offsets = {208};
      break;
    default:
      break;
  }
  for (size_t b = 0; b < n_blocks; ++b)
    for (size_t k = 0; k < scale_offsets.size(); ++k) {
      // Q4_1/Q5_1 keep a min (second field) that can be negative.
      float v = scale(rng);
      if (k == 1 && (t == DType::Q4_1 || t == DType::Q5_1)) v = -4.f * v * (rng() & 1 ? 1 : -1);
      put16(b * info.block_bytes + size_t(scale_offsets[k]), f32_to_fp16(v));
    }
  return bytes;
}

}  // namespace hearth::test
