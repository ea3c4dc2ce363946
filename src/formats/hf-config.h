// Hugging Face config.json and tokenizer_config.json, normalised: legacy `rope_theta` +
// `rope_scaling` and the newer `rope_parameters` both land in HfRope. Field names are HF's
// PretrainedConfig conventions; mapping them onto an architecture is model/'s job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth {

struct HfRope {
  double theta = 10000.0;
  std::string type = "default";  // "default", "linear", "llama3", "yarn", "longrope", ...
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // YaRN (absent: transformers' defaults, which model/ applies).
  std::optional<double> beta_fast, beta_slow, attention_factor, mscale, mscale_all_dim;
  std::optional<bool> truncate;
  // LongRoPE: per-frequency divisors for contexts beyond / within the original one.
  std::vector<double> long_factor, short_factor;
  std::optional<double> partial_rotary_factor;  // rope_parameters' copy of the top-level key
};

struct HfConfig {
  std::vector<std::string> architectures;  // "LlamaForCausalLM"
  std::string model_type;                  // "llama", "mistral", "qwen2"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::string hidden_act = "silu";
  std::optional<int64_t> sliding_window;
  std::optional<bool> use_sliding_window;    // Qwen2: false means sliding_window is unused
  std::optional<int64_t> max_window_layers;  // Qwen2: layers from here on slide (older configs)
  std::optional<int64_t> sliding_window_pattern;  // Gemma 3 (older configs): every n-th is full
  std::vector<std::string> layer_types;  // "full_attention" / "sliding_attention" per layer
  std::string hidden_activation;         // Gemma's spelling of hidden_act (wins when set)
  std::optional<double> query_pre_attn_scalar;
  std::optional<double> attn_logit_softcapping, final_logit_softcapping;
  std::optional<double> partial_rotary_factor;
  std::optional<HfRope> rope_local;  // sliding layers' RoPE when it differs (Gemma 3)
  std::optional<double> rope_local_base_freq;
  // Mixture-of-experts FFN: Mixtral's num_local_experts, Qwen3-MoE's num_experts.
  std::optional<int64_t> num_local_experts, num_experts, num_experts_per_tok;
  std::optional<int64_t> moe_intermediate_size;  // Qwen3-MoE: the experts' width
  std::optional<int64_t> decoder_sparse_step;    // Qwen3-MoE: every n-th layer is sparse
  std::vector<int64_t> mlp_only_layers;          // Qwen3-MoE: layers kept dense
  std::optional<bool> norm_topk_prob;            // Qwen3-MoE: renormalise the top-k weights
  std::optional<double> swiglu_limit;            // gpt-oss: the clamped SwiGLU's limit
  std::vector<int64_t> bos_token_ids;
  std::vector<int64_t> eos_token_ids;  // eos_token_id may be an int or a list
  HfRope rope;
  std::string torch_dtype;
  int transformers_major = 0;  // major version in transformers_version (0: not given)
  // Set when config.json wraps a language model in text_config (a vision-language checkpoint):
  // the wrapper's model_type ("gemma3"). Everything above is then text_config's; its weights sit
  // under the wrapper's prefixes (SafetensorsCheckpoint::keep_language_model).
  std::string text_of;
};

// `source` names the file in error messages ("llama2-tiny/config.json: hidden_size: ...").
Result<HfConfig> parse_hf_config(const std::string& json_text, const std::string& source);

struct HfTokenizerConfig {
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::string bos_token, eos_token, unk_token, pad_token;  // content strings
  std::string chat_template;                               // empty when absent
  std::string tokenizer_class;
  int64_t model_max_length = 0;
};
Result<HfTokenizerConfig> parse_hf_tokenizer_config(const std::string& json_text,
                                                    const std::string& source);

}  // namespace hearth
