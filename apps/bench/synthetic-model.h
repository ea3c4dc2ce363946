// Synthetic models for `hearth bench --synthetic SHAPE:TYPE`: random weights of a real model's
// shapes (the same as ../shared/tools/mkgguf.py), written as a temporary GGUF and loaded through
// the normal loader so load timing stays honest. Adding a shape: one row in synthetic-model.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace hearth::bench {

struct SyntheticShape {
  std::string name;  // "llama2-7b"
  int64_t n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab, n_ctx;
  double rope_theta;
};

struct SyntheticSpec {
  SyntheticShape shape;
  DType type;  // type of the 2-D weights (embedding and head included); norms are F32
};

// Parses "llama2-7b:q4_0" (shapes: tinyllama-1b, llama2-7b, llama3-8b; types: f16, bf16, q8_0,
// q4_0, q4_k, q6_k).
Result<SyntheticSpec> parse_synthetic(const std::string& text);
std::vector<std::string> synthetic_shape_names();

// Writes the model to `path` with random valid blocks (block scales fixed at 0.002 like
// mkgguf.py, so activations stay finite); returns the file size.
Result<uint64_t> write_synthetic_gguf(const SyntheticSpec& spec, const std::string& path,
                                      uint64_t seed = 1);

}  // namespace hearth::bench
