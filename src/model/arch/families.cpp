// The supported families, one row each: names, and the blocks that set each apart from Llama.
// Mistral ships as GGUF architecture "llama" (llama.cpp's converter maps it so) and as HF
// model_type "mistral": same row as Llama; its sliding window comes from the file.
#include "model/arch.h"

namespace hearth {

namespace {

using kernels::RopeStyle;

const std::vector<ArchSpec>& families() {
  static const std::vector<ArchSpec> rows = {
      {
          // Mixtral too: llama.cpp writes it as "llama" with {arch}.expert_count and stacked
          // blk.N.ffn_{gate,up,down}_exps tensors.
          .gguf_name = "llama",
          .hf_model_types = {"llama", "mistral"},
          .hf_architectures = {"LlamaForCausalLM", "MistralForCausalLM"},
          .gguf_rope_style = RopeStyle::kInterleaved,
      },
      {
          // HF Mixtral: a Mistral whose FFN is a mixture of experts (softmax, top-k,
          // renormalised). Converted, it is GGUF "llama": a GGUF name finds the row above.
          .gguf_name = "llama",
          .hf_model_types = {"mixtral"},
          .hf_architectures = {"MixtralForCausalLM"},
          .gguf_rope_style = RopeStyle::kInterleaved,
          .hf_moe = {"block_sparse_moe", "w1", "w3", "w2"},
      },
      {
          .gguf_name = "mistral",  // some converters write this name; same layout as llama
          .gguf_rope_style = RopeStyle::kInterleaved,
      },
      {
          .gguf_name = "qwen2",
          .hf_model_types = {"qwen2"},
          .hf_architectures = {"Qwen2ForCausalLM"},
          .qkv_bias = true,
          .gguf_rope_style = RopeStyle::kHalves,
          .default_rms_eps = 1e-6,
          .default_rope_theta = 1000000.0,
      },
      {
          .gguf_name = "qwen3",
          .hf_model_types = {"qwen3"},
          .hf_architectures = {"Qwen3ForCausalLM"},
          .gguf_rope_style = RopeStyle::kHalves,
          .default_rms_eps = 1e-6,
          .default_rope_theta = 1000000.0,
          .qk_norm = true,
      },
      {
          // Qwen3 with MoE FFNs (every decoder_sparse_step-th layer not in mlp_only_layers).
          .gguf_name = "qwen3moe",
          .hf_model_types = {"qwen3_moe"},
          .hf_architectures = {"Qwen3MoeForCausalLM"},
          .gguf_rope_style = RopeStyle::kHalves,
          .default_rms_eps = 1e-6,
          .default_rope_theta = 1000000.0,
          .qk_norm = true,
          .hf_moe = {"mlp", "gate_proj", "up_proj", "down_proj"},
      },
      {
          .gguf_name = "gemma2",
          .hf_model_types = {"gemma2"},
          .hf_architectures = {"Gemma2ForCausalLM"},
          .gguf_rope_style = RopeStyle::kHalves,
          .default_rms_eps = 1e-6,
          .norms = NormPlacement::kSandwich,
          .norm_plus_one = true,
          .embed_scale_sqrt = true,
          .default_activation = FfnActivation::kGeluTanh,
          .gguf_sliding = {.period = 2},
          .query_scale_by_width_layers = 46,  // Gemma 2 27B
      },
      {
          .gguf_name = "gemma3",
          .hf_model_types = {"gemma3_text"},
          .hf_architectures = {"Gemma3ForCausalLM"},
          .gguf_rope_style = RopeStyle::kHalves,
          .default_rms_eps = 1e-6,
          .default_rope_theta = 1000000.0,
          .norms = NormPlacement::kSandwich,
          .norm_plus_one = true,
          .qk_norm = true,
          .embed_scale_sqrt = true,
          .default_activation = FfnActivation::kGeluTanh,
          .gguf_sliding = {.period = 6},
          .default_local_rope_theta = 10000.0,
          .query_scale_by_width_layers = 62,  // Gemma 3 27B
      },
      {
          // Phi-3 and Phi-4-mini: fused qkv_proj / gate_up_proj (split into row views at load),
          // partial rotary (Phi-4-mini), LongRoPE.
          .gguf_name = "phi3",
          .hf_model_types = {"phi3"},
          .hf_architectures = {"Phi3ForCausalLM"},
          .gguf_rope_style = RopeStyle::kHalves,
      },
      {
          // gpt-oss: every FFN a mixture of experts (router and experts with biases, top-k of
          // the router logits then softmax over the k = softmax, top-k, renormalise), the
          // clamped SwiGLU, biases on Q/K/V/O, attention sinks, every other layer sliding
          // (the first slides), YaRN. llama.cpp calls it "gpt-oss".
          .gguf_name = "gpt-oss",
          .hf_model_types = {"gpt_oss"},
          .hf_architectures = {"GptOssForCausalLM"},
          .qkv_bias = true,
          .gguf_rope_style = RopeStyle::kHalves,
          .default_rope_theta = 150000.0,
          .default_activation = FfnActivation::kSwigluClamped,
          .gguf_sliding = {.period = 2},
          .hf_moe = {.block = "mlp",
                     .gate = "",
                     .up = "",
                     .down = "",
                     .router = "router",
                     .stacked = true},
          .moe_norm_topk = true,
          .attn_out_bias = true,
          .attn_sinks = true,
          .moe_biases = true,
          .gguf_ffn_norm = "post_attention_norm.weight",
      },
  };
  return rows;
}

}  // namespace

const ArchSpec* find_arch_by_gguf_name(const std::string& name) {
  for (const auto& a : families())  // the first row of a name: "llama" is Llama's row
    if (a.gguf_name == name) return &a;
  return nullptr;
}

const ArchSpec* find_arch_by_hf(const std::string& model_type,
                                const std::vector<std::string>& architectures) {
  for (const auto& a : families())
    for (const auto& t : a.hf_model_types)
      if (t == model_type) return &a;
  for (const auto& a : families())
    for (const auto& want : a.hf_architectures)
      for (const auto& have : architectures)
        if (want == have) return &a;
  return nullptr;
}

std::vector<std::string> known_arch_names() {
  std::vector<std::string> names;
  for (const auto& a : families())
    if (names.empty() || names.back() != a.gguf_name) names.push_back(a.gguf_name);
  return names;
}

std::vector<std::string> known_hf_model_types() {
  std::vector<std::string> names;
  for (const auto& a : families())
    for (const auto& t : a.hf_model_types) names.push_back(t);
  return names;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace hearth
