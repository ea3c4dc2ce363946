// config.json -> ModelSpec: transformers' field names and defaults, per family where they
// differ (which layers slide, Gemma's scales, partial rotary, every RoPE type Hearth runs).
#include <cmath>

#include "base/half.h"
#include "base/printable.h"
#include "formats/hf-config.h"
#include "model/arch-read.h"

namespace hearth {

namespace {

Result<std::vector<float>> factors_of(const std::vector<double>& v, int64_t n, const char* field) {
  if (int64_t(v.size()) != n)
    return Status::error(std::string("rope_scaling.") + field + ": has " +
                         std::to_string(v.size()) + " entries, expected " + std::to_string(n) +
                         " (rotary dims / 2)");
  std::vector<float> out;
  for (double x : v) {
    if (!(x > 0) || !std::isfinite(x))
      return Status::error(std::string("rope_scaling.") + field + ": entries must be positive");
    out.push_back(float(x));
  }
  return out;
}

// One RoPE table from an HF rope object for n_rot rotated dims.
Result<RopeTable> rope_table(const HfRope& r, int64_t n_rot, int64_t max_pos,
                             const std::string& where) {
  RopeTable t;
  if (r.type == "default" || r.type == "linear" || r.type == "llama3") {
    t.inv_freq = rope_inv_freq(n_rot, r.theta, r.type, r.factor, r.low_freq_factor,
                               r.high_freq_factor, r.original_max_position_embeddings);
    return t;
  }
  if (r.type == "yarn") {
    YarnParams y;
    y.theta = r.theta;
    y.factor = r.factor;
    // transformers: with original_max_position_embeddings given, the factor is the ratio of
    // the contexts (DeepSeek-V3 and Qwen configs keep both consistent).
    y.original_context = r.original_max_position_embeddings;
    if (y.original_context > 0 && max_pos > 0)
      y.factor = double(max_pos) / double(y.original_context);
    if (y.original_context <= 0) y.original_context = max_pos;
    if (y.original_context <= 0)
      return Status::error(where + ".original_max_position_embeddings: required for yarn");
    if (!(y.factor >= 1))
      return Status::error(where + ".factor: yarn needs a factor >= 1, got " +
                           std::to_string(y.factor));
    y.beta_fast = r.beta_fast.value_or(32);
    y.beta_slow = r.beta_slow.value_or(1);
    if (!(y.beta_fast > 0) || !(y.beta_slow > 0))
      return Status::error(where + ".beta_fast / beta_slow: must be positive");
    y.attention_factor = r.attention_factor.value_or(0);
    y.mscale = r.mscale.value_or(0);
    y.mscale_all_dim = r.mscale_all_dim.value_or(0);
    y.truncate = r.truncate.value_or(true);
    return yarn_rope_table(n_rot, y);
  }
  if (r.type == "longrope") {
    HEARTH_ASSIGN_OR_RETURN(auto shorts, factors_of(r.short_factor, n_rot / 2, "short_factor"));
    HEARTH_ASSIGN_OR_RETURN(auto longs, factors_of(r.long_factor, n_rot / 2, "long_factor"));
    const int64_t orig =
        r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings : max_pos;
    return longrope_table(n_rot, r.theta, shorts, longs, r.attention_factor.value_or(0), max_pos,
                          orig);
  }
  return Status::error(where + ": rope type '" + printable(r.type, 80) +
                       "' is not supported (default, linear, llama3, yarn, longrope)");
}

// Which layers slide, in transformers' rules: layer_types when given, else per family.
Status read_layer_windows(const HfConfig& c, const ArchSpec& arch, HParams& hp) {
  hp.layers.assign(size_t(hp.n_layer), LayerAttention{});
  std::vector<bool> sliding(size_t(hp.n_layer), false);
  if (!c.layer_types.empty()) {
    if (int64_t(c.layer_types.size()) != hp.n_layer)
      return Status::error("layer_types: has " + std::to_string(c.layer_types.size()) +
                           " entries for " + std::to_string(hp.n_layer) + " layers");
    for (size_t l = 0; l < sliding.size(); ++l) {
      const std::string& t = c.layer_types[l];
      if (t != "full_attention" && t != "sliding_attention")
        return Status::error("layer_types[" + std::to_string(l) + "]: '" + printable(t, 80) +
                             "' is not supported (full_attention, sliding_attention)");
      sliding[l] = t == "sliding_attention";
    }
  } else if (c.sliding_window) {
    if (c.model_type == "qwen2" || c.model_type == "qwen3" || c.model_type == "qwen3_moe") {
      // Qwen: use_sliding_window turns it on for the layers from max_window_layers on.
      if (c.use_sliding_window.value_or(false))
        for (int64_t l = c.max_window_layers.value_or(0); l < hp.n_layer; ++l)
          sliding[size_t(l)] = true;
    } else if (c.model_type == "mistral" || c.model_type == "phi3") {
      sliding.assign(sliding.size(), true);
    } else if (arch.gguf_sliding.period > 1) {
      const int64_t period = c.sliding_window_pattern.value_or(arch.gguf_sliding.period);
      if (period <= 0) return Status::error("sliding_window_pattern: must be positive");
      for (int64_t l = 0; l < hp.n_layer; ++l) sliding[size_t(l)] = (l + 1) % period != 0;
    }
    // model_type llama: transformers ignores sliding_window, and so does Hearth.
  }
  bool any = false;
  for (bool s : sliding) any = any || s;
  if (!any) return Status::ok();
  if (!c.sliding_window || *c.sliding_window <= 0)
    return Status::error("sliding_window: sliding layers need a positive window, got " +
                         (c.sliding_window ? std::to_string(*c.sliding_window) : "none"));
  for (size_t l = 0; l < sliding.size(); ++l)
    if (sliding[l]) hp.layers[l] = {*c.sliding_window, 1};
  return Status::ok();
}

// Mixture-of-experts FFN: expert counts and width, renormalisation, which layers are sparse
// (transformers' Qwen3-MoE rule: not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0).
Status read_hf_moe(const HfConfig& c, HParams& hp) {
  // Mixtral's field is num_local_experts, Qwen3-MoE's num_experts (either is read).
  const bool local = c.num_local_experts || (!c.num_experts && c.model_type == "mixtral");
  const char* count_field = local ? "num_local_experts" : "num_experts";
  const auto count = c.num_local_experts ? c.num_local_experts : c.num_experts;
  if (!count || *count <= 0 || *count > 65536)
    return Status::error(std::string(count_field) + ": the MoE family " + c.model_type +
                         " needs a positive expert count, got " +
                         (count ? std::to_string(*count) : "none"));
  hp.n_expert = *count;
  if (!c.num_experts_per_tok || *c.num_experts_per_tok <= 0 || *c.num_experts_per_tok > hp.n_expert)
    return Status::error("num_experts_per_tok: must be in [1, " + std::string(count_field) + " " +
                         std::to_string(hp.n_expert) + "], got " +
                         (c.num_experts_per_tok ? std::to_string(*c.num_experts_per_tok) : "none"));
  hp.n_expert_used = *c.num_experts_per_tok;
  hp.n_ff_exp = c.moe_intermediate_size.value_or(hp.n_ff);
  if (hp.n_ff_exp <= 0)
    return Status::error("moe_intermediate_size: must be positive, got " +
                         std::to_string(hp.n_ff_exp));
  // Mixtral always renormalises; transformers' Qwen3-MoE only with norm_topk_prob (default off).
  hp.moe_norm_topk = c.norm_topk_prob.value_or(c.model_type != "qwen3_moe");
  const int64_t step = c.decoder_sparse_step.value_or(1);
  if (step <= 0)
    return Status::error("decoder_sparse_step: must be positive, got " + std::to_string(step));
  hp.moe_layers.assign(size_t(hp.n_layer), false);
  for (int64_t l = 0; l < hp.n_layer; ++l) hp.moe_layers[size_t(l)] = (l + 1) % step == 0;
  for (int64_t l : c.mlp_only_layers) {
    if (l < 0 || l >= hp.n_layer)
      return Status::error("mlp_only_layers: layer " + std::to_string(l) + " is out of range (" +
                           std::to_string(hp.n_layer) + " layers)");
    hp.moe_layers[size_t(l)] = false;
  }
  return Status::ok();
}

}  // namespace

Result<FfnActivation> activation_from_hf(const std::string& name, const std::string& field) {
  if (name == "silu" || name == "swish") return FfnActivation::kSilu;
  // gelu_fast is the same tanh approximation written as x (1 + 0.044715 x^2).
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast" ||
      name == "gelu_tanh")
    return FfnActivation::kGeluTanh;
  return Status::error(field + ": activation '" + printable(name, 80) +
                       "' is not supported (silu, gelu_pytorch_tanh)");
}

Result<ModelSpec> read_hf_spec(const HfConfig& c) {
  ModelSpec s;
  s.arch = find_arch_by_hf(c.model_type, c.architectures);
  if (!s.arch)
    return Status::error("model_type: unknown architecture '" + printable(c.model_type, 80) +
                         "'; supported: " + join_names(known_hf_model_types()));
  const ArchSpec& arch = *s.arch;
  HParams& hp = s.hp;
  hp.n_vocab = c.vocab_size;
  hp.n_embd = c.hidden_size;
  hp.n_layer = c.num_hidden_layers;
  if (hp.n_layer > kMaxLayers)
    return Status::error("num_hidden_layers: " + std::to_string(hp.n_layer) + " is more than " +
                         std::to_string(kMaxLayers) + " layers");
  hp.n_head = c.num_attention_heads;
  hp.n_head_kv = c.num_key_value_heads;
  hp.head_dim = c.head_dim;
  hp.n_ff = c.intermediate_size;
  hp.n_ctx_train = c.max_position_embeddings > 0 ? c.max_position_embeddings : 2048;
  hp.rms_eps = float(c.rms_norm_eps);
  hp.rope_theta = c.rope.theta;
  hp.tied_embeddings = c.tie_word_embeddings;
  hp.norms = arch.norms;
  hp.qk_norm = arch.qk_norm;
  if (arch.default_activation == FfnActivation::kSwigluClamped) {
    // gpt-oss: hidden_act says "silu", but its experts clamp (transformers' GptOssExperts).
    hp.activation = FfnActivation::kSwigluClamped;
    hp.swiglu_limit = float(c.swiglu_limit.value_or(7.0));
    if (!(hp.swiglu_limit > 0) || !std::isfinite(hp.swiglu_limit))
      return Status::error("swiglu_limit: must be positive, got " +
                           std::to_string(*c.swiglu_limit));
  } else if (!c.hidden_activation.empty()) {
    HEARTH_ASSIGN_OR_RETURN(hp.activation,
                            activation_from_hf(c.hidden_activation, "hidden_activation"));
  } else {
    HEARTH_ASSIGN_OR_RETURN(hp.activation, activation_from_hf(c.hidden_act, "hidden_act"));
  }

  const double partial = c.partial_rotary_factor.value_or(1.0);
  if (!(partial > 0 && partial <= 1))
    return Status::error("partial_rotary_factor: must be in (0, 1], got " +
                         std::to_string(partial));
  if (hp.head_dim <= 0 || hp.head_dim > kMaxHeadDim)
    return Status::error("head_dim: " + std::to_string(hp.head_dim) + " is not in 1.." +
                         std::to_string(kMaxHeadDim));
  hp.n_rot = int64_t(double(hp.head_dim) * partial);  // transformers: int(head_dim * factor)

  if (c.query_pre_attn_scalar) {
    if (!(*c.query_pre_attn_scalar > 0))
      return Status::error("query_pre_attn_scalar: must be positive");
    hp.query_scale = float(1.0 / std::sqrt(*c.query_pre_attn_scalar));
  } else {
    hp.query_scale = float(1.0 / std::sqrt(double(hp.head_dim)));
  }
  if (c.attn_logit_softcapping) {
    if (!(*c.attn_logit_softcapping > 0))
      return Status::error("attn_logit_softcapping: must be positive (or null), got " +
                           std::to_string(*c.attn_logit_softcapping));
    hp.attn_softcap = float(*c.attn_logit_softcapping);
  }
  if (c.final_logit_softcapping) {
    if (!(*c.final_logit_softcapping > 0))
      return Status::error("final_logit_softcapping: must be positive (or null), got " +
                           std::to_string(*c.final_logit_softcapping));
    hp.final_softcap = float(*c.final_logit_softcapping);
  }
  if (arch.embed_scale_sqrt) {
    // transformers multiplies by sqrt(hidden_size) cast to the embeddings' dtype.
    hp.embed_scale = float(std::sqrt(double(hp.n_embd)));
    if (c.torch_dtype == "bfloat16") hp.embed_scale = bf16_to_f32(f32_to_bf16(hp.embed_scale));
    if (c.torch_dtype == "float16") hp.embed_scale = fp16_to_f32(f32_to_fp16(hp.embed_scale));
  }
  HEARTH_TRY(read_layer_windows(c, arch, hp));
  if (*arch.hf_moe.block) HEARTH_TRY(read_hf_moe(c, hp));

  hp.rope_scaling = c.rope.type == "default" ? "none" : c.rope.type;
  hp.rope_factor = c.rope.factor;
  if (hp.n_rot <= 0 || hp.n_rot % 2 != 0)
    return Status::error("partial_rotary_factor: gives " + std::to_string(hp.n_rot) +
                         " rotary dims; an even count is needed");
  HEARTH_ASSIGN_OR_RETURN(s.rope[0],
                          rope_table(c.rope, hp.n_rot, c.max_position_embeddings, "rope_scaling"));
  if (c.rope_local || c.rope_local_base_freq || arch.default_local_rope_theta > 0) {
    HfRope local;
    if (c.rope_local) {
      local = *c.rope_local;
    } else {
      local.theta = c.rope_local_base_freq.value_or(arch.default_local_rope_theta);
    }
    HEARTH_ASSIGN_OR_RETURN(RopeTable t, rope_table(local, hp.n_rot, c.max_position_embeddings,
                                                    "rope_parameters.sliding_attention"));
    s.rope.push_back(std::move(t));
  } else {
    for (auto& l : hp.layers) l.rope = 0;  // sliding layers share the one table
  }
  // transformers 5 keeps the rotary inv_freq buffer in the model's dtype (config `dtype`), so
  // its bf16 / f16 checkpoints rotate by frequencies rounded to it; earlier versions kept f32.
  if (c.transformers_major >= 5 && (c.torch_dtype == "bfloat16" || c.torch_dtype == "float16"))
    hp.rope_freq_type = c.torch_dtype == "bfloat16" ? "bf16" : "f16";
  for (RopeTable& t : s.rope) HEARTH_TRY(round_rope_freqs(t, hp.rope_freq_type));

  s.rope_style = kernels::RopeStyle::kHalves;
  return s;
}

}  // namespace hearth
