// Tensor names of the Llama-family layout in both on-disk conventions: llama.cpp's GGUF names and
// Hugging Face's. The loaders and `hearth convert` share this one table.
#pragma once

#include <cstdint>
#include <string>

namespace hearth {

enum class TensorRole {
  kTokenEmbedding,
  kOutputNorm,
  kOutput,
  kRopeFreqs,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOut,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
};
constexpr TensorRole kLayerRoles[] = {
    TensorRole::kAttnNorm, TensorRole::kAttnQ,     TensorRole::kAttnK,     TensorRole::kAttnV,
    TensorRole::kAttnOut,  TensorRole::kAttnQBias, TensorRole::kAttnKBias, TensorRole::kAttnVBias,
    TensorRole::kFfnNorm,  TensorRole::kFfnGate,   TensorRole::kFfnUp,     TensorRole::kFfnDown,
};

// layer is ignored for model-level roles. HF has no rope_freqs tensor (returns "").
std::string gguf_tensor_name(TensorRole role, int64_t layer = -1);
std::string hf_tensor_name(TensorRole role, int64_t layer = -1);

}  // namespace hearth
