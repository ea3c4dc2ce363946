// Tensor names in both on-disk conventions: llama.cpp's GGUF names and Hugging Face's. The
// loaders and `hearth convert` share this one table. HF's names depend on where the family
// normalises (arch.h NormPlacement): Gemma's post_attention_layernorm is the post-attention
// norm, Llama's is the FFN's pre-norm.
#pragma once

#include <cstdint>
#include <string>

#include "model/arch.h"

namespace hearth {

enum class TensorRole {
  kTokenEmbedding,
  kOutputNorm,
  kOutput,
  kRopeFreqs,
  kRopeFactorsLong,  // LongRoPE divisors (GGUF only; HF keeps them in config.json)
  kRopeFactorsShort,
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnQkv,  // fused Q/K/V rows (Phi-3)
  kAttnOut,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kAttnQNorm,  // per-head norms (Qwen3, Gemma 3)
  kAttnKNorm,
  kAttnPostNorm,  // sandwich norms (Gemma 2/3)
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnGateUp,  // fused gate/up rows (Phi-3); llama.cpp calls it ffn_up (2 x n_ff rows)
  kFfnDown,
  kFfnPostNorm,
  // Mixture-of-experts FFN: the router [n_expert, n_embd] and the experts' projections, stacked
  // in GGUF ([n_expert, rows, cols]); HF keeps one tensor per expert (hf_moe_tensor_name).
  kFfnGateInp,
  kFfnGateExps,
  kFfnUpExps,
  kFfnDownExps,
  // gpt-oss: O bias, attention sinks [n_head], router bias, the experts' biases (stacked
  // [n_expert, rows] in GGUF), and HF's stacked interleaved gate_up experts and their bias.
  kAttnOutBias,
  kAttnSinks,
  kFfnGateInpBias,
  kFfnGateExpsBias,
  kFfnUpExpsBias,
  kFfnDownExpsBias,
  kFfnGateUpExps,  // HF only (hf_moe_tensor_name)
  kFfnGateUpExpsBias,
};
constexpr TensorRole kLayerRoles[] = {
    TensorRole::kAttnNorm,    TensorRole::kAttnQ,       TensorRole::kAttnK,
    TensorRole::kAttnV,       TensorRole::kAttnQkv,     TensorRole::kAttnOut,
    TensorRole::kAttnQBias,   TensorRole::kAttnKBias,   TensorRole::kAttnVBias,
    TensorRole::kAttnQNorm,   TensorRole::kAttnKNorm,   TensorRole::kAttnPostNorm,
    TensorRole::kFfnNorm,     TensorRole::kFfnGate,     TensorRole::kFfnUp,
    TensorRole::kFfnGateUp,   TensorRole::kFfnDown,     TensorRole::kFfnPostNorm,
    TensorRole::kFfnGateInp,  TensorRole::kFfnGateExps, TensorRole::kFfnUpExps,
    TensorRole::kFfnDownExps, TensorRole::kAttnOutBias, TensorRole::kAttnSinks,
};

// layer is ignored for model-level roles. HF has no rope_freqs / rope factor tensors (returns "").
std::string gguf_tensor_name(TensorRole role, int64_t layer = -1);
// The family's GGUF name where it differs from the table (ArchSpec::gguf_ffn_norm).
std::string gguf_tensor_name(const ArchSpec& arch, TensorRole role, int64_t layer = -1);
std::string hf_tensor_name(TensorRole role, int64_t layer = -1,
                           NormPlacement norms = NormPlacement::kPre);

// HF's names of a family's MoE tensors (ArchSpec::hf_moe): the router (kFfnGateInp; expert
// ignored) and expert `expert`'s projection (kFfnGateExps / kFfnUpExps / kFfnDownExps); "" when
// the family has none. Stacked families (gpt-oss; expert ignored): kFfnGateInp(Bias),
// kFfnGateUpExps(Bias), kFfnDownExps(Bias).
std::string hf_moe_tensor_name(const ArchSpec& arch, TensorRole role, int64_t layer,
                               int64_t expert = -1);

// Norm vectors (kept f32 by the converter; Gemma's get the (1 + w) convention).
bool is_norm_role(TensorRole role);

}  // namespace hearth
