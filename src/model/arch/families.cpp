// The supported families, one row each. Mistral ships as GGUF architecture "llama" (llama.cpp's
// converter maps it so) and as HF model_type "mistral": same row as Llama.
#include "model/arch.h"

namespace hearth {

namespace {

const std::vector<ArchSpec>& families() {
  static const std::vector<ArchSpec> rows = {
      {
          .gguf_name = "llama",
          .hf_model_types = {"llama", "mistral"},
          .hf_architectures = {"LlamaForCausalLM", "MistralForCausalLM"},
          .qkv_bias = false,
          .gguf_rope_style = kernels::RopeStyle::kInterleaved,
          .default_rms_eps = 1e-5,
          .default_rope_theta = 10000.0,
      },
      {
          .gguf_name = "mistral",  // some converters write this name; same layout as llama
          .hf_model_types = {},
          .hf_architectures = {},
          .qkv_bias = false,
          .gguf_rope_style = kernels::RopeStyle::kInterleaved,
          .default_rms_eps = 1e-5,
          .default_rope_theta = 10000.0,
      },
      {
          .gguf_name = "qwen2",
          .hf_model_types = {"qwen2"},
          .hf_architectures = {"Qwen2ForCausalLM"},
          .qkv_bias = true,
          .gguf_rope_style = kernels::RopeStyle::kHalves,
          .default_rms_eps = 1e-6,
          .default_rope_theta = 1000000.0,
      },
  };
  return rows;
}

}  // namespace

const ArchSpec* find_arch_by_gguf_name(const std::string& name) {
  for (const auto& a : families())
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
  for (const auto& a : families()) names.push_back(a.gguf_name);
  return names;
}

}  // namespace hearth
