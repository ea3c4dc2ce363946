// Output types of convert/quantize and llama-quantize's per-tensor type rules (which tensors
// get more bits in the _M mixes, fallbacks for rows no block fits). New type = row in the table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace hearth::convert {

struct OutputType {
  std::string name;    // "q4_k_m"
  uint32_t file_type;  // llama_ftype, written as general.file_type
  DType base;          // the type most weight matrices get
  bool mixes = false;  // the _M rules (attn_v / ffn_down get Q6_K in some layers)
  // Set: the MoE expert stacks (blk.N.ffn_{gate,up,down}_exps.weight) get this type and the
  // other matrices `base` (llama.cpp's MXFP4_MOE: experts MXFP4, as gpt-oss ships them).
  std::optional<DType> experts;
};

Result<OutputType> parse_output_type(const std::string& name);
std::string output_type_list();  // "f32, f16, ..."

// Whether a tensor is a weight matrix that takes the output type (norms, biases, rope_freqs and
// other vectors, and MoE routers, stay as they are: f32).
bool is_weight_matrix(const std::string& gguf_name, const std::vector<int64_t>& shape);

// Facts about the whole model the rules look at.
struct ModelFacts {
  int64_t n_layer = 0;
  bool has_output = false;  // an output.weight tensor exists (else token_embd is the LM head)
};

struct TypeChoice {
  DType dtype;
  bool fell_back = false;  // the preferred type did not fit the row length
  DType preferred;
};

// The dtype llama-quantize would give weight matrix `gguf_name` of `shape` (outermost-first;
// the row length is shape.back()).
TypeChoice choose_type(const OutputType& t, const std::string& gguf_name,
                       const std::vector<int64_t>& shape, const ModelFacts& facts);

}  // namespace hearth::convert
