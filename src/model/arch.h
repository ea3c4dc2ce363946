// Architectures as data. A family is one ArchSpec row (arch/families.cpp): its names in GGUF and
// HF and the blocks its layers are made of. The loader reads a file's hyper-parameters into the
// flat per-model description (HParams in model.h) that the ONE generic forward pass walks.
// Adding a family = adding a row (docs/adding-an-arch.md); a new kind of block = a flag here, a
// field in HParams, and the branch in model/forward.cpp.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"

namespace hearth {

// The FFN's gate activation: out = act(gate) * up; gpt-oss's clamped form is
// out = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit).
enum class FfnActivation { kSilu, kGeluTanh, kSwigluClamped };

// Where a layer normalises: before attention and FFN (Llama), or also after each ("sandwich":
// Gemma 2/3's post-attention and post-FFN norms, applied to the block's output before the add).
enum class NormPlacement { kPre, kSandwich };

// Which layers slide when a file gives a window but no per-layer list (llama.cpp's GGUF files
// carry only the window): every layer, or all but every n-th (Gemma 2: n = 2, Gemma 3: n = 6).
struct SlidingPattern {
  int period = 1;  // 1: every layer slides; n > 1: layer l slides unless (l + 1) % n == 0
};

// A mixture-of-experts FFN's tensors in HF checkpoints: "model.layers.N.{block}.gate.weight"
// (the router) and "model.layers.N.{block}.experts.E.{gate,up,down}.weight".
// gpt-oss keeps its experts stacked instead ("{block}.experts.gate_up_proj" [n_expert, n_embd,
// 2 * n_ff] laid out for x @ W with gate and up interleaved, "{block}.experts.down_proj"
// [n_expert, n_ff, n_embd], and their "_bias" tensors) and calls its router "{block}.router".
struct HfMoeNames {
  const char* block = "";  // empty: the family has no MoE
  const char* gate = "";
  const char* up = "";
  const char* down = "";
  const char* router = "gate";
  bool stacked = false;  // gpt-oss's stacked, interleaved layout (model/hf-stacked-experts.h)
};

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

  // --- blocks ---
  NormPlacement norms = NormPlacement::kPre;
  // HF stores Gemma's norm weights as w and normalises with (1 + w); llama.cpp's converter
  // stores 1 + w. Hearth keeps GGUF's convention: HF weights get the 1 added at load.
  bool norm_plus_one = false;
  bool qk_norm = false;           // per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3)
  bool embed_scale_sqrt = false;  // embeddings times sqrt(n_embd) (Gemma)
  FfnActivation default_activation = FfnActivation::kSilu;
  SlidingPattern gguf_sliding;  // which layers a GGUF file's sliding_window applies to
  // Sliding layers' RoPE base when the file does not say (Gemma 3: 10000; 0 = same as global).
  double default_local_rope_theta = 0;
  // Query scale when the file gives none: 1/sqrt(head_dim), except llama.cpp's size rule for
  // Gemma (the 27B models scale by n_embd / n_head): that many layers selects it (0 = never).
  int64_t query_scale_by_width_layers = 0;
  // Mixture-of-experts FFN (HParams::n_expert > 0): HF names, and whether the top-k routing
  // weights are renormalised to sum to 1 when the file does not say (Mixtral always does; HF
  // Qwen3-MoE says with norm_topk_prob; GGUF with {arch}.expert_weights_norm).
  HfMoeNames hf_moe;
  bool moe_norm_topk = true;
  // gpt-oss: a bias on the O projection, a learned sink logit per head in every attention
  // softmax, and biases on the router and on each expert's projections.
  bool attn_out_bias = false;
  bool attn_sinks = false;
  bool moe_biases = false;
  // The GGUF name of the FFN's pre-norm when the family's differs from "ffn_norm.weight"
  // (llama.cpp's gpt-oss: "post_attention_norm.weight"); empty: the usual name.
  const char* gguf_ffn_norm = "";
};

// nullptr when unknown.
const ArchSpec* find_arch_by_gguf_name(const std::string& name);
const ArchSpec* find_arch_by_hf(const std::string& model_type,
                                const std::vector<std::string>& architectures);
std::vector<std::string> known_arch_names();
std::vector<std::string> known_hf_model_types();
// "a, b, c" (the lists in load errors).
std::string join_names(const std::vector<std::string>& names);

}  // namespace hearth
