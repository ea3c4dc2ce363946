// GGUF metadata -> ModelSpec: llama.cpp's {arch}.* keys (gguf-py constants.py), with llama.cpp's
// own rules where its files leave a block implicit (which layers slide, Gemma's query scale and
// embedding scale, Gemma 3's local RoPE base, LongRoPE as rope_factors_* tensors).
#include <cmath>

#include "base/printable.h"
#include "formats/gguf.h"
#include "model/arch-read.h"
#include "model/tensor-names.h"

namespace hearth {

namespace {

// A float vector tensor of n elements (rope factors), or an error naming it.
Result<std::vector<float>> float_vector(const GgufFile& f, TensorRole role, int64_t n) {
  const std::string name = gguf_tensor_name(role);
  const TensorView* t = f.find_tensor(name);
  if (!t) return Status::error("missing tensor " + name);
  if (t->numel() != n)
    return Status::error("tensor " + name + " has " + std::to_string(t->numel()) +
                         " elements, expected " + std::to_string(n));
  if (!dtype_info(t->dtype).runnable || dtype_info(t->dtype).quantized)
    return Status::error("tensor " + name + " must be a float type");
  std::vector<float> v(static_cast<size_t>(n));
  kernels::dequantize_row(t->dtype, t->data, v.data(), n);
  return v;
}

}  // namespace

Result<ModelSpec> read_gguf_spec(const GgufFile& f) {
  ModelSpec s;
  HEARTH_ASSIGN_OR_RETURN(auto arch_name, f.get_string("general.architecture"));
  if (!arch_name) return Status::error("missing key general.architecture");
  s.arch = find_arch_by_gguf_name(*arch_name);
  if (!s.arch)
    return Status::error("unknown architecture '" + printable(*arch_name, 80) +
                         "' (general.architecture); supported: " + join_names(known_arch_names()));
  const ArchSpec& arch = *s.arch;
  const std::string a = *arch_name + ".";
  auto need_int = [&](const std::string& key, int64_t* out) -> Status {
    HEARTH_ASSIGN_OR_RETURN(auto v, f.get_int(a + key));
    if (!v) return Status::error("missing key " + a + key);
    if (*v <= 0 || *v > (int64_t(1) << 31))
      return Status::error("key " + a + key + " has invalid value " + std::to_string(*v));
    *out = *v;
    return Status::ok();
  };
  auto positive = [&](const std::string& key) -> Result<std::optional<double>> {
    HEARTH_ASSIGN_OR_RETURN(auto v, f.get_float(a + key));
    if (v && !(*v > 0 && std::isfinite(*v)))
      return Status::error("key " + a + key + " must be positive, got " + std::to_string(*v));
    return v;
  };
  HParams& hp = s.hp;
  HEARTH_TRY(need_int("embedding_length", &hp.n_embd));
  HEARTH_TRY(need_int("block_count", &hp.n_layer));
  // Each layer has tensors of its own, so a count past the file's tensors cannot be true.
  if (hp.n_layer > kMaxLayers || uint64_t(hp.n_layer) > f.tensors().size())
    return Status::error("key " + a + "block_count " + std::to_string(hp.n_layer) +
                         " exceeds what the file holds (" + std::to_string(f.tensors().size()) +
                         " tensors)");
  HEARTH_TRY(need_int("feed_forward_length", &hp.n_ff));
  HEARTH_TRY(need_int("attention.head_count", &hp.n_head));
  HEARTH_ASSIGN_OR_RETURN(auto kv, f.get_int(a + "attention.head_count_kv"));
  hp.n_head_kv = kv ? *kv : hp.n_head;
  HEARTH_ASSIGN_OR_RETURN(auto ctx, f.get_int(a + "context_length"));
  if (ctx && *ctx <= 0)
    return Status::error("key " + a + "context_length has invalid value " + std::to_string(*ctx));
  hp.n_ctx_train = ctx ? *ctx : 2048;
  HEARTH_ASSIGN_OR_RETURN(auto key_len, f.get_int(a + "attention.key_length"));
  hp.head_dim = key_len ? *key_len : (hp.n_embd / hp.n_head);
  HEARTH_ASSIGN_OR_RETURN(auto value_len, f.get_int(a + "attention.value_length"));
  if (value_len && *value_len != hp.head_dim)
    return Status::error("key " + a + "attention.value_length " + std::to_string(*value_len) +
                         " differs from attention.key_length " + std::to_string(hp.head_dim) +
                         " (not supported)");
  HEARTH_ASSIGN_OR_RETURN(auto rot, f.get_int(a + "rope.dimension_count"));
  hp.n_rot = rot ? *rot : hp.head_dim;
  HEARTH_ASSIGN_OR_RETURN(auto eps, f.get_float(a + "attention.layer_norm_rms_epsilon"));
  hp.rms_eps = float(eps ? *eps : arch.default_rms_eps);
  HEARTH_ASSIGN_OR_RETURN(auto theta, f.get_float(a + "rope.freq_base"));
  hp.rope_theta = theta ? *theta : arch.default_rope_theta;
  hp.norms = arch.norms;
  hp.qk_norm = arch.qk_norm;
  hp.activation = arch.default_activation;
  // Hearth's key (llama.cpp fixes gpt-oss's limit at 7): written only when a model differs.
  HEARTH_ASSIGN_OR_RETURN(auto swiglu_limit, positive("swiglu_limit"));
  if (swiglu_limit) hp.swiglu_limit = float(*swiglu_limit);

  // Mixture of experts (llama.cpp's keys): the layers with a router are sparse.
  HEARTH_ASSIGN_OR_RETURN(auto n_expert, f.get_int(a + "expert_count"));
  if (n_expert && *n_expert != 0) {
    if (*n_expert < 0 || *n_expert > 65536)
      return Status::error("key " + a + "expert_count has invalid value " +
                           std::to_string(*n_expert));
    hp.n_expert = *n_expert;
    HEARTH_TRY(need_int("expert_used_count", &hp.n_expert_used));
    if (hp.n_expert_used > hp.n_expert)
      return Status::error("key " + a + "expert_used_count " + std::to_string(hp.n_expert_used) +
                           " exceeds " + a + "expert_count " + std::to_string(hp.n_expert));
    HEARTH_ASSIGN_OR_RETURN(auto ff_exp, f.get_int(a + "expert_feed_forward_length"));
    hp.n_ff_exp = ff_exp ? *ff_exp : hp.n_ff;
    if (hp.n_ff_exp <= 0)
      return Status::error("key " + a + "expert_feed_forward_length has invalid value " +
                           std::to_string(hp.n_ff_exp));
    HEARTH_ASSIGN_OR_RETURN(auto norm_w, f.get_bool(a + "expert_weights_norm"));
    hp.moe_norm_topk = norm_w.value_or(arch.moe_norm_topk);
    hp.moe_layers.assign(size_t(hp.n_layer), false);
    bool any = false;
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      const bool sparse = f.find_tensor(gguf_tensor_name(TensorRole::kFfnGateInp, l)) != nullptr;
      hp.moe_layers[size_t(l)] = sparse;
      any = any || sparse;
    }
    if (!any)
      return Status::error("key " + a + "expert_count is set but no layer has a router (" +
                           gguf_tensor_name(TensorRole::kFfnGateInp, 0) + ")");
  }

  // Query scale: the file's, else llama.cpp's rule (Gemma 27B: n_embd / n_head).
  HEARTH_ASSIGN_OR_RETURN(auto scale, positive("attention.scale"));
  const bool by_width =
      arch.query_scale_by_width_layers > 0 && hp.n_layer == arch.query_scale_by_width_layers;
  hp.query_scale =
      scale ? float(*scale)
            : float(1.0 / std::sqrt(double(by_width ? hp.n_embd / hp.n_head : hp.head_dim)));
  HEARTH_ASSIGN_OR_RETURN(auto attn_cap, positive("attn_logit_softcapping"));
  if (attn_cap) hp.attn_softcap = float(*attn_cap);
  HEARTH_ASSIGN_OR_RETURN(auto final_cap, positive("final_logit_softcapping"));
  if (final_cap) hp.final_softcap = float(*final_cap);
  // Gemma: sqrt(n_embd) (llama.cpp's rule) unless the file gives the reference's own value.
  HEARTH_ASSIGN_OR_RETURN(auto embed_scale, positive("embedding_scale"));
  if (embed_scale)
    hp.embed_scale = float(*embed_scale);
  else if (arch.embed_scale_sqrt)
    hp.embed_scale = float(std::sqrt(double(hp.n_embd)));

  // Sliding layers: the window applies per the family's pattern (llama.cpp's set_swa_pattern).
  hp.layers.assign(size_t(hp.n_layer), LayerAttention{});
  HEARTH_ASSIGN_OR_RETURN(auto window, f.get_int(a + "attention.sliding_window"));
  if (window) {
    if (*window <= 0 || *window > (int64_t(1) << 31))
      return Status::error("key " + a + "attention.sliding_window has invalid value " +
                           std::to_string(*window));
    const int period = arch.gguf_sliding.period;
    for (int64_t l = 0; l < hp.n_layer; ++l)
      if (period <= 1 || (l + 1) % period != 0) hp.layers[size_t(l)] = {*window, 1};
  }

  // RoPE: the global table, and Gemma 3's local one.
  if (hp.head_dim <= 0 || hp.head_dim > kMaxHeadDim)
    return Status::error("head dimension " + std::to_string(hp.head_dim) + " (" + a +
                         (key_len ? "attention.key_length" : "embedding_length / head_count") +
                         ") is not in 1.." + std::to_string(kMaxHeadDim));
  if (hp.n_rot <= 0 || hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim)
    return Status::error("key " + a + "rope.dimension_count " + std::to_string(hp.n_rot) +
                         " must be even and at most the head dimension " +
                         std::to_string(hp.head_dim));
  HEARTH_ASSIGN_OR_RETURN(auto stype, f.get_string(a + "rope.scaling.type"));
  HEARTH_ASSIGN_OR_RETURN(auto sfactor, positive("rope.scaling.factor"));
  HEARTH_ASSIGN_OR_RETURN(auto orig_ctx, f.get_int(a + "rope.scaling.original_context_length"));
  HEARTH_ASSIGN_OR_RETURN(auto attn_factor, positive("rope.scaling.attn_factor"));
  const std::string type = stype.value_or("none");
  RopeTable& global = s.rope[0];
  if (f.find_tensor(gguf_tensor_name(TensorRole::kRopeFactorsLong))) {
    // LongRoPE (Phi-3): llama.cpp stores the divisors as tensors and the attention factor.
    HEARTH_ASSIGN_OR_RETURN(auto longs,
                            float_vector(f, TensorRole::kRopeFactorsLong, hp.n_rot / 2));
    HEARTH_ASSIGN_OR_RETURN(auto shorts,
                            float_vector(f, TensorRole::kRopeFactorsShort, hp.n_rot / 2));
    const int64_t orig = orig_ctx && *orig_ctx > 0 ? *orig_ctx : hp.n_ctx_train;
    global = longrope_table(hp.n_rot, hp.rope_theta, shorts, longs, attn_factor.value_or(0),
                            hp.n_ctx_train, orig);
    hp.rope_scaling = "longrope";
  } else if (type == "none" || type == "linear") {
    const bool linear = type == "linear" && sfactor;
    hp.rope_scaling = linear ? "linear" : "none";
    hp.rope_factor = linear ? *sfactor : 1.0;
    global.inv_freq =
        rope_inv_freq(hp.n_rot, hp.rope_theta, hp.rope_scaling, hp.rope_factor, 1, 4, 0);
  } else if (type == "yarn") {
    YarnParams y;
    y.theta = hp.rope_theta;
    y.factor = sfactor.value_or(1.0);
    y.original_context = orig_ctx && *orig_ctx > 0 ? *orig_ctx : hp.n_ctx_train;
    HEARTH_ASSIGN_OR_RETURN(auto beta_fast, positive("rope.scaling.yarn_beta_fast"));
    HEARTH_ASSIGN_OR_RETURN(auto beta_slow, positive("rope.scaling.yarn_beta_slow"));
    y.beta_fast = beta_fast.value_or(32);
    y.beta_slow = beta_slow.value_or(1);
    // Hearth's key: false when the reference does not round YaRN's ramp ends (gpt-oss's
    // truncate: false); llama.cpp always rounds them, and so does a file without the key.
    HEARTH_ASSIGN_OR_RETURN(auto truncate, f.get_bool(a + "rope.scaling.yarn_truncate"));
    y.truncate = truncate.value_or(true);
    global = yarn_rope_table(hp.n_rot, y);
    // llama.cpp's attn_factor multiplies the factor YaRN derives.
    if (attn_factor) global.mscale *= float(*attn_factor);
    hp.rope_scaling = "yarn";
    hp.rope_factor = y.factor;
  } else {
    return Status::error("unsupported RoPE scaling '" + printable(type, 80) + "' (" + a +
                         "rope.scaling.type)");
  }
  // llama.cpp stores llama3-style scaling as per-frequency divisors.
  if (f.find_tensor(gguf_tensor_name(TensorRole::kRopeFreqs))) {
    HEARTH_ASSIGN_OR_RETURN(auto divisors, float_vector(f, TensorRole::kRopeFreqs, hp.n_rot / 2));
    for (size_t i = 0; i < divisors.size(); ++i) global.inv_freq[i] /= divisors[i];
    hp.rope_scaling = "freqs";
  }
  if (arch.default_local_rope_theta > 0) {
    HEARTH_ASSIGN_OR_RETURN(auto local_theta, positive("rope.freq_base_swa"));
    RopeTable local;
    local.inv_freq = rope_inv_freq(hp.n_rot, local_theta.value_or(arch.default_local_rope_theta),
                                   "none", 1, 1, 4, 0);
    s.rope.push_back(std::move(local));
  } else {
    for (auto& l : hp.layers) l.rope = 0;
  }
  // Hearth's own key (llama.cpp ignores it): frequencies in the checkpoint's dtype, as the
  // HF reference computed them (HParams::rope_freq_type).
  HEARTH_ASSIGN_OR_RETURN(auto freq_type, f.get_string(a + "rope.inv_freq_type"));
  if (freq_type) hp.rope_freq_type = *freq_type;
  for (RopeTable& t : s.rope) {
    Status st = round_rope_freqs(t, hp.rope_freq_type);
    if (!st.is_ok()) return Status::error(st.message() + " (" + a + "rope.inv_freq_type)");
  }
  s.rope_style = arch.gguf_rope_style;
  return s;
}

Status check_model_spec(const ModelSpec& s) {
  const HParams& hp = s.hp;
  if (hp.n_head <= 0 || hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    return Status::error("head counts " + std::to_string(hp.n_head) + "/" +
                         std::to_string(hp.n_head_kv) + " are not a valid GQA grouping");
  if (hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.head_dim > kMaxHeadDim)
    return Status::error("invalid head dimension " + std::to_string(hp.head_dim));
  if (hp.n_layer <= 0 || hp.n_layer > kMaxLayers) return Status::error("invalid layer count");
  if (hp.n_rot <= 0 || hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim)
    return Status::error("rotary dims " + std::to_string(hp.n_rot) +
                         " must be even and at most head_dim " + std::to_string(hp.head_dim));
  if (int64_t(hp.layers.size()) != hp.n_layer) return Status::error("layer list size mismatch");
  for (const RopeTable& t : s.rope) {
    if (int64_t(t.inv_freq.size()) != hp.n_rot / 2 ||
        (!t.inv_freq_long.empty() && int64_t(t.inv_freq_long.size()) != hp.n_rot / 2))
      return Status::error("RoPE table size does not match the rotary dims");
    for (float x : t.inv_freq)
      if (!(x > 0) || !std::isfinite(x)) return Status::error("RoPE frequencies must be positive");
    if (!(t.mscale > 0) || !std::isfinite(t.mscale))
      return Status::error("RoPE attention factor must be positive");
  }
  for (const auto& l : hp.layers)
    if (l.rope < 0 || l.rope >= int(s.rope.size()))
      return Status::error("layer RoPE table out of range");
  if (!(hp.query_scale > 0) || !std::isfinite(hp.query_scale))
    return Status::error("query scale must be positive");
  if (hp.n_expert > 0 && (hp.n_expert_used <= 0 || hp.n_expert_used > hp.n_expert ||
                          hp.n_ff_exp <= 0 || int64_t(hp.moe_layers.size()) != hp.n_layer))
    return Status::error("invalid mixture-of-experts sizes (" + std::to_string(hp.n_expert_used) +
                         " of " + std::to_string(hp.n_expert) + " experts)");
  return Status::ok();
}

}  // namespace hearth
