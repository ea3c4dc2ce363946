// Architectures as data. A family is one ArchSpec row (arch/*.cpp): its names in GGUF and HF, and
// flags that steer the ONE generic forward pass. Adding a Llama-like family = adding a row.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"

namespace hearth {

struct ArchSpec {
  std::string gguf_name;                      // general.architecture value, "llama"
  std::vector<std::string> hf_model_types;    // config.json model_type values
  std::vector<std::string> hf_architectures;  // config.json architectures values
  bool qkv_bias = false;                      // Q/K/V projections carry biases (Qwen2)
  // Pair layout of RoPE for weights as stored in GGUF. llama.cpp's converter permutes Q/K rows of
  // "llama" so that adjacent pairs rotate; other families keep HF's halves layout.
  kernels::RopeStyle gguf_rope_style = kernels::RopeStyle::kInterleaved;
  double default_rms_eps = 1e-5;
  double default_rope_theta = 10000.0;
};

// nullptr when unknown.
const ArchSpec* find_arch_by_gguf_name(const std::string& name);
const ArchSpec* find_arch_by_hf(const std::string& model_type,
                                const std::vector<std::string>& architectures);
std::vector<std::string> known_arch_names();

}  // namespace hearth
