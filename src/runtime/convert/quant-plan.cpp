// The output-type table and llama-quantize's mixing rules. The rules follow llama.cpp's
// llama_tensor_get_type for the types offered here; rows that no block fits fall back as it does.
#include "runtime/convert/quant-plan.h"

#include <cctype>
#include <cstdlib>

namespace hearth::convert {

namespace {

const std::vector<OutputType>& table() {
  // file_type values are llama.cpp's llama_ftype numbers.
  static const std::vector<OutputType> rows = {
      {"f32", 0, DType::F32, false},
      {"f16", 1, DType::F16, false},
      {"bf16", 32, DType::BF16, false},
      {"q8_0", 7, DType::Q8_0, false},
      {"q4_0", 2, DType::Q4_0, false},
      {"q4_k_m", 15, DType::Q4_K, true},
      {"q5_k_m", 17, DType::Q5_K, true},
      {"q6_k", 18, DType::Q6_K, false},
      {"mxfp4_moe", 38, DType::Q8_0, false, DType::MXFP4},
  };
  return rows;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "blk.12.ffn_down.weight" -> 12; -1 when the name is not per-layer.
int64_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  const char* p = name.c_str() + 4;
  char* end = nullptr;
  const long v = std::strtol(p, &end, 10);
  return (end != p && *end == '.') ? int64_t(v) : -1;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool use_more_bits(int64_t i_layer, int64_t n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

bool fits(DType t, int64_t row) {
  return row > 0 && row % int64_t(dtype_info(t).block_size) == 0;
}

bool is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

}  // namespace

Result<OutputType> parse_output_type(const std::string& name) {
  std::string lower;
  for (char c : name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& t : table())
    if (t.name == lower) return t;
  return Status::error("unsupported output type '" + name + "' (supported: " + output_type_list() +
                       ")");
}

std::string output_type_list() {
  std::string s;
  for (const auto& t : table()) s += (s.empty() ? "" : ", ") + t.name;
  return s;
}

bool is_weight_matrix(const std::string& name, const std::vector<int64_t>& shape) {
  // MoE routers stay f32, as llama.cpp keeps them: their logits pick the experts.
  return shape.size() >= 2 && ends_with(name, ".weight") && !ends_with(name, "_norm.weight") &&
         !ends_with(name, "ffn_gate_inp.weight");
}

TypeChoice choose_type(const OutputType& t, const std::string& name,
                       const std::vector<int64_t>& shape, const ModelFacts& facts) {
  const int64_t row = shape.empty() ? 0 : shape.back();
  DType want = t.base;
  const bool expert_stack = ends_with(name, "_exps.weight");
  if (t.experts && expert_stack) {
    want = *t.experts;
  } else if (!is_float(t.base)) {
    const bool lm_head =
        name == "output.weight" || (!facts.has_output && name == "token_embd.weight");
    const int64_t layer = layer_of(name);
    if (lm_head) {
      // The LM head is the most sensitive matrix: Q6_K unless the type is already Q8_0, or Q8_0
      // when the row is not a multiple of the K-quant super-block.
      if (row % 256 != 0)
        want = DType::Q8_0;
      else if (want != DType::Q8_0)
        want = DType::Q6_K;
    } else if (t.mixes && layer >= 0 &&
               (ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight")) &&
               use_more_bits(layer, facts.n_layer)) {
      want = DType::Q6_K;
    }
  }
  TypeChoice c{want, false, want};
  if (fits(want, row)) return c;
  // llama-quantize's fallbacks for a row that is not a multiple of 256; Q8_0 / Q4_0 rows that
  // are not a multiple of 32 go to F16 as llama.cpp's converter does.
  c.fell_back = true;
  switch (want) {
    case DType::Q4_K:
      c.dtype = DType::Q5_0;
      break;
    case DType::Q5_K:
      c.dtype = DType::Q5_1;
      break;
    case DType::Q6_K:
      c.dtype = DType::Q8_0;
      break;
    default:
      c.dtype = DType::F16;
      break;
  }
  if (!fits(c.dtype, row)) c.dtype = DType::F16;
  return c;
}

}  // namespace hearth::convert
