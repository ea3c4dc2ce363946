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
  // The family's blocks, as llama.cpp's GGUF of it says them (defaults: Llama).
  std::string arch = "llama";   // general.architecture
  int64_t head_dim = 0;         // 0: n_embd / n_head
  bool qk_norm = false;         // blk.N.attn_{q,k}_norm (Qwen3)
  bool sandwich_norms = false;  // blk.N.post_attention_norm / post_ffw_norm (Gemma 2)
  bool tied_output = false;     // no output.weight: the LM head is token_embd
  int64_t sliding_window = 0;   // {arch}.attention.sliding_window
  float attn_softcap = 0, final_softcap = 0;
  double rms_eps = 1e-5;
  // Mixture of experts (n_expert > 0): every layer's FFN is n_expert experts of width n_ff_exp
  // (GGUF's stacked ffn_{gate,up,down}_exps) behind a router, n_expert_used per token.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  // gpt-oss's blocks as llama.cpp writes them: biases on Q/K/V/O, one sink logit per head,
  // biases on the router and the experts, YaRN (factor over the original context), the experts
  // in their own type (MXFP4; F32: the file's type) and the FFN pre-norm under its name.
  bool attn_biases = false, attn_sinks = false, moe_biases = false;
  double yarn_factor = 0;
  int64_t yarn_orig_ctx = 0;
  DType expert_type = DType::F32;
  std::string ffn_norm = "ffn_norm.weight";
};

struct SyntheticSpec {
  SyntheticShape shape;
  DType type;  // type of the 2-D weights (embedding and head included); norms are F32
  // q4_k_m / q5_k_m: llama-quantize's _M mix over Q4_K / Q5_K: the LM head (a tied embedding
  // too) in Q6_K, and attn_v / ffn_down in Q6_K on its "more bits" layers (the first and last
  // eighth, and every third between): what a downloaded Q4_K_M / Q5_K_M file streams.
  bool k_m_mix = false;
};

// Parses "llama2-7b:q4_0" (shapes: tinyllama-1b, llama2-7b, llama3-8b, qwen3-8b, gemma2-9b,
// gemma3-12b, gemma3-27b, qwen3-30b-a3b, gpt-oss-20b, qwen3-moe-mini, qwen3-moe-mini-dense;
// types: f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m).
Result<SyntheticSpec> parse_synthetic(const std::string& text);
// "q4_0", "q4_k_m": the TYPE part as the user names it (file names use it).
std::string synthetic_type_name(const SyntheticSpec& spec);
std::vector<std::string> synthetic_shape_names();

// Writes the model to `path` with random valid blocks (block scales fixed at 0.002 like
// mkgguf.py, so activations stay finite); returns the file size.
Result<uint64_t> write_synthetic_gguf(const SyntheticSpec& spec, const std::string& path,
                                      uint64_t seed = 1);

}  // namespace hearth::bench
