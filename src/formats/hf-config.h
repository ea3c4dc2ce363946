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
  std::string type = "default";  // "default", "linear", "llama3", "yarn", ...
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
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
  std::vector<int64_t> bos_token_ids;
  std::vector<int64_t> eos_token_ids;  // eos_token_id may be an int or a list
  HfRope rope;
  std::string torch_dtype;
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
