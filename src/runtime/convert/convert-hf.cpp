// HF directory -> GGUF: hparams as {arch}.* keys, tokenizer metadata, weights renamed to GGUF
// names, Q/K permuted for "llama", llama3 rope factors as rope_freqs.weight, LongRoPE's as
// rope_factors_*, Gemma's norms as 1 + w, fused Phi-3 tensors kept fused: llama.cpp's layout.
// One tensor in memory at a time. A new hparam key: add it in hparam_metadata().
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>

#include "base/mapped-file.h"
#include "formats/safetensors.h"
#include "model/arch-read.h"
#include "model/arch.h"
#include "model/hf-stacked-experts.h"
#include "model/tensor-names.h"
#include "runtime/convert/convert-vocab.h"
#include "runtime/convert/convert.h"
#include "runtime/convert/quant-plan.h"
#include "runtime/convert/tensor-encode.h"

namespace hearth {

namespace {

namespace fs = std::filesystem;
using namespace convert;

// "llama2-tiny" -> "Llama2 Tiny", "kjv-13m" -> "Kjv 13m": llama.cpp's id_to_title, which
// title-cases lowercase words but keeps versions and words that start with a digit.
std::string model_name_from_dir(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::string base = p.filename().string();
  for (char& c : base)
    if (c == '-') c = ' ';
  std::string out, word;
  auto flush = [&] {
    if (word.empty()) return;
    bool has_lower = false, has_upper = false;
    for (char c : word) {
      has_lower = has_lower || std::islower(static_cast<unsigned char>(c));
      has_upper = has_upper || std::isupper(static_cast<unsigned char>(c));
    }
    const bool version =
        word.size() > 1 && word[0] == 'v' && std::isdigit(static_cast<unsigned char>(word[1]));
    const bool digit_first = std::isdigit(static_cast<unsigned char>(word[0])) != 0;
    if (has_lower && !has_upper && !version && !digit_first) {
      bool prev_letter = false;  // Python's str.title(): upper after a non-letter
      for (char& c : word) {
        const bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
        if (letter && !prev_letter) c = char(std::toupper(static_cast<unsigned char>(c)));
        prev_letter = letter;
      }
    }
    out += (out.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : base) {
    if (c == ' ')
      flush();
    else
      word += c;
  }
  flush();
  return out;
}

// llama.cpp's size label: 3 significant digits at most, e.g. "6.4M", "13M", "1.1B".
std::string size_label(uint64_t params) {
  const char* suffix = "K";
  double scaled = double(params) * 1e-3;
  if (params >= 1000000000000ull)
    suffix = "T", scaled = double(params) * 1e-12;
  else if (params >= 1000000000ull)
    suffix = "B", scaled = double(params) * 1e-9;
  else if (params >= 1000000ull)
    suffix = "M", scaled = double(params) * 1e-6;
  const int64_t rounded = int64_t(std::llround(scaled));
  const int digits = rounded == 0 ? 0 : int(std::to_string(rounded).size());
  const int fix = digits >= 2 ? 0 : 2 - digits;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f%s", fix, scaled, suffix);
  return buf;
}

// The llama3 per-frequency divisors llama.cpp stores as rope_freqs.weight (its RoPE divides
// each base frequency by them). Float math like the converter's torch float32 code.
std::vector<float> llama3_rope_factors(const HfConfig& c) {
  const HfRope& r = c.rope;
  const float factor = float(r.factor);
  const float lo = float(r.low_freq_factor), hi = float(r.high_freq_factor);
  const float old_ctx =
      float(r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings : 8192);
  const float low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi;
  std::vector<float> out;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    const float freq = 1.0f / std::pow(float(r.theta), float(i) / float(c.head_dim));
    const float wavelen = float(2.0 * M_PI) / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

// YaRN's attention factor when the config does not give one (transformers' get_mscale).
double yarn_derived_mscale(double factor) {
  return factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0;
}

// The layers a GGUF file of this family slides, given its window (llama.cpp's patterns): the
// config's own layer list must be that one, since GGUF carries only the window.
Status check_sliding_pattern(const ModelSpec& spec, const std::string& cfg_path) {
  const int period = spec.arch->gguf_sliding.period;
  for (int64_t l = 0; l < spec.hp.n_layer; ++l) {
    const bool slides = spec.hp.layers[size_t(l)].window > 0;
    const bool gguf_slides = period <= 1 || (l + 1) % period != 0;
    if (slides != gguf_slides)
      return Status::error(cfg_path + ": layer_types: layer " + std::to_string(l) +
                           (slides ? " slides" : " is full") + ", which a " + spec.arch->gguf_name +
                           " GGUF cannot express (its sliding_window applies to " +
                           (period <= 1 ? std::string("every layer")
                                        : "all but every " + std::to_string(period) + "th") +
                           ")");
  }
  return Status::ok();
}

Status hparam_metadata(const HfConfig& c, const ModelSpec& spec, const std::string& dir,
                       const OutputType& type, uint64_t n_params, GgufWriter& w) {
  const ArchSpec& arch = *spec.arch;
  const HParams& hp = spec.hp;
  const std::string a = arch.gguf_name + ".";
  const std::string cfg_path = dir + "/config.json";
  w.set_string("general.architecture", arch.gguf_name);
  w.set_string("general.type", "model");
  w.set_string("general.name", model_name_from_dir(dir));
  w.set_string("general.size_label", size_label(n_params));
  w.set_u32(a + "block_count", uint32_t(c.num_hidden_layers));
  if (c.max_position_embeddings > 0)  // optional in config.json, as in llama.cpp's converter
    w.set_u32(a + "context_length", uint32_t(c.max_position_embeddings));
  w.set_u32(a + "embedding_length", uint32_t(c.hidden_size));
  w.set_u32(a + "feed_forward_length", uint32_t(c.intermediate_size));
  w.set_u32(a + "attention.head_count", uint32_t(c.num_attention_heads));
  w.set_u32(a + "attention.head_count_kv", uint32_t(c.num_key_value_heads));
  if (hp.n_expert > 0) {  // llama.cpp's MoE keys; which layers are sparse: their routers
    w.set_u32(a + "expert_count", uint32_t(hp.n_expert));
    w.set_u32(a + "expert_used_count", uint32_t(hp.n_expert_used));
    if (c.moe_intermediate_size || arch.hf_moe.stacked)  // llama.cpp's gpt-oss files have it
      w.set_u32(a + "expert_feed_forward_length", uint32_t(hp.n_ff_exp));
    if (hp.moe_norm_topk != arch.moe_norm_topk)
      w.set_bool(a + "expert_weights_norm", hp.moe_norm_topk);
  }
  w.set_f32(a + "rope.freq_base", float(c.rope.theta));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  const std::string& rope = c.rope.type;
  if (rope == "linear") {
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_f32(a + "rope.scaling.factor", float(c.rope.factor));
  } else if (rope == "yarn") {
    const RopeTable& t = spec.rope[0];
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", float(hp.rope_factor));
    const int64_t orig = c.rope.original_max_position_embeddings > 0
                             ? c.rope.original_max_position_embeddings
                             : c.max_position_embeddings;
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(orig));
    if (c.rope.beta_fast) w.set_f32(a + "rope.scaling.yarn_beta_fast", float(*c.rope.beta_fast));
    if (c.rope.beta_slow) w.set_f32(a + "rope.scaling.yarn_beta_slow", float(*c.rope.beta_slow));
    if (!c.rope.truncate.value_or(true)) w.set_bool(a + "rope.scaling.yarn_truncate", false);
    // llama.cpp's attn_factor multiplies the derived one; write only what differs from it.
    const double extra = double(t.mscale) / yarn_derived_mscale(hp.rope_factor);
    if (std::fabs(extra - 1.0) > 1e-6) w.set_f32(a + "rope.scaling.attn_factor", float(extra));
  } else if (rope == "longrope") {
    // llama.cpp: the factors as rope_factors_{long,short} tensors, these two keys.
    w.set_f32(a + "rope.scaling.attn_factor", spec.rope[0].mscale);
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(spec.rope[0].long_beyond));
  } else if (rope != "default" && rope != "llama3") {
    return Status::error(cfg_path + ": rope_scaling: type '" + rope +
                         "' is not supported (default, linear, llama3, yarn, longrope)");
  }
  w.set_u32("general.file_type", type.file_type);
  w.set_u32(a + "vocab_size", uint32_t(c.vocab_size));
  w.set_u32(a + "rope.dimension_count", uint32_t(hp.n_rot));
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {
    w.set_u32(a + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(a + "attention.value_length", uint32_t(c.head_dim));
  }
  if (hp.any_sliding()) {
    HEARTH_TRY(check_sliding_pattern(spec, cfg_path));
    w.set_u32(a + "attention.sliding_window", uint32_t(*c.sliding_window));
  }
  if (hp.attn_softcap > 0) w.set_f32(a + "attn_logit_softcapping", hp.attn_softcap);
  if (hp.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", hp.final_softcap);
  if (c.query_pre_attn_scalar) w.set_f32(a + "attention.scale", hp.query_scale);
  if (hp.rope_freq_type != "f32") w.set_string(a + "rope.inv_freq_type", hp.rope_freq_type);
  if (hp.embed_scale > 0) w.set_f32(a + "embedding_scale", hp.embed_scale);
  // Hearth's key for a clamped SwiGLU limit other than llama.cpp's fixed 7 (gpt-oss).
  if (hp.activation == FfnActivation::kSwigluClamped && hp.swiglu_limit != 7.0f)
    w.set_f32(a + "swiglu_limit", hp.swiglu_limit);
  if (spec.rope.size() > 1) {
    if (c.rope_local && c.rope_local->type != "default")
      return Status::error(cfg_path + ": rope_parameters.sliding_attention: type '" +
                           c.rope_local->type + "' has no GGUF form (default only)");
    const double local = c.rope_local
                             ? c.rope_local->theta
                             : c.rope_local_base_freq.value_or(arch.default_local_rope_theta);
    w.set_f32(a + "rope.freq_base_swa", float(local));
  }
  return Status::ok();
}

// One output tensor: where it comes from and how it is written.
struct Planned {
  GgufTensorInfo info;              // nbytes unused: the writer derives it
  const TensorView* src = nullptr;  // null for generated tensors (rope_freqs)
  // MoE: the experts' HF tensors [rows, cols], written stacked as [n_expert, rows, cols].
  std::vector<const TensorView*> stack;
  std::vector<float> generated;
  // gpt-oss: one part of HF's stacked experts (hf-stacked-experts.h), written expert by expert
  // as [n_expert, rows, cols] (matrices) or [n_expert, n] (biases).
  const TensorView* stacked = nullptr;
  StackedExpertPart part = StackedExpertPart::kGate;
  bool stacked_bias = false;
  int64_t permute_heads = 0;  // > 0: permute rows for interleaved RoPE with this head count
  bool plus_one = false;      // Gemma norm: HF's w is written as llama.cpp's 1 + w
  bool fell_back = false;
  DType preferred = DType::F32;
};

Status check_config(const HfConfig& c, const std::string& where) {
  auto positive = [&](int64_t v, const char* field) -> Status {
    if (v <= 0 || v > (int64_t(1) << 31))
      return Status::error(where + ": " + field + ": must be positive, got " + std::to_string(v));
    return Status::ok();
  };
  HEARTH_TRY(positive(c.vocab_size, "vocab_size"));
  HEARTH_TRY(positive(c.hidden_size, "hidden_size"));
  HEARTH_TRY(positive(c.intermediate_size, "intermediate_size"));
  HEARTH_TRY(positive(c.num_hidden_layers, "num_hidden_layers"));
  HEARTH_TRY(positive(c.num_attention_heads, "num_attention_heads"));
  HEARTH_TRY(positive(c.num_key_value_heads, "num_key_value_heads"));
  HEARTH_TRY(positive(c.head_dim, "head_dim"));
  return Status::ok();
}

// The GGUF tensors a layer must have (one of each group), given what the plan holds.
std::vector<std::vector<std::string>> needed_layer_tensors(const ModelSpec& spec, int64_t l) {
  auto n = [&spec, l](TensorRole r) { return gguf_tensor_name(*spec.arch, r, l); };
  std::vector<std::vector<std::string>> need = {
      {n(TensorRole::kAttnNorm)},
      {n(TensorRole::kAttnOut)},
      {n(TensorRole::kFfnNorm)},
      // separate Q, K, V and gate, or the fused forms (ffn_up then has both halves)
      {n(TensorRole::kAttnQ), n(TensorRole::kAttnQkv)},
      {n(TensorRole::kAttnK), n(TensorRole::kAttnQkv)},
      {n(TensorRole::kAttnV), n(TensorRole::kAttnQkv)},
  };
  if (spec.hp.is_moe_layer(l)) {
    for (TensorRole r : {TensorRole::kFfnGateInp, TensorRole::kFfnGateExps, TensorRole::kFfnUpExps,
                         TensorRole::kFfnDownExps})
      need.push_back({n(r)});
  } else {
    need.push_back({n(TensorRole::kFfnUp)}), need.push_back({n(TensorRole::kFfnDown)});
  }
  if (spec.hp.qk_norm)
    need.push_back({n(TensorRole::kAttnQNorm)}), need.push_back({n(TensorRole::kAttnKNorm)});
  const ArchSpec& arch = *spec.arch;
  if (arch.attn_out_bias) need.push_back({n(TensorRole::kAttnOutBias)});
  if (arch.attn_sinks) need.push_back({n(TensorRole::kAttnSinks)});
  if (arch.moe_biases && spec.hp.is_moe_layer(l))
    for (TensorRole r : {TensorRole::kFfnGateInpBias, TensorRole::kFfnGateExpsBias,
                         TensorRole::kFfnUpExpsBias, TensorRole::kFfnDownExpsBias})
      need.push_back({n(r)});
  if (spec.hp.norms == NormPlacement::kSandwich)
    need.push_back({n(TensorRole::kAttnPostNorm)}), need.push_back({n(TensorRole::kFfnPostNorm)});
  return need;
}

// gpt-oss: an HF stacked expert tensor of layer l as its GGUF tensors, llama.cpp's layout:
// gate_up_proj -> ffn_gate_exps and ffn_up_exps [n_expert, n_ff, n_embd] (de-interleaved),
// down_proj -> ffn_down_exps [n_expert, n_embd, n_ff], and their biases [n_expert, rows].
Status plan_stacked_experts(const ArchSpec& arch, const HParams& hp, const TensorView& t, int64_t l,
                            const std::string& dir, std::vector<Planned>& out) {
  const int64_t NE = hp.n_expert, E = hp.n_embd, F = hp.n_ff_exp;
  struct Part {
    TensorRole hf, gguf;
    StackedExpertPart part;
    bool bias;
  };
  const Part parts[] = {
      {TensorRole::kFfnGateUpExps, TensorRole::kFfnGateExps, StackedExpertPart::kGate, false},
      {TensorRole::kFfnGateUpExps, TensorRole::kFfnUpExps, StackedExpertPart::kUp, false},
      {TensorRole::kFfnDownExps, TensorRole::kFfnDownExps, StackedExpertPart::kDown, false},
      {TensorRole::kFfnGateUpExpsBias, TensorRole::kFfnGateExpsBias, StackedExpertPart::kGate,
       true},
      {TensorRole::kFfnGateUpExpsBias, TensorRole::kFfnUpExpsBias, StackedExpertPart::kUp, true},
      {TensorRole::kFfnDownExpsBias, TensorRole::kFfnDownExpsBias, StackedExpertPart::kDown, true},
  };
  for (const Part& p : parts) {
    if (hf_moe_tensor_name(arch, p.hf, l) != t.name) continue;
    const bool down = p.part == StackedExpertPart::kDown;
    const std::vector<int64_t> want =
        p.bias ? std::vector<int64_t>{NE, down ? E : 2 * F}
               : (down ? std::vector<int64_t>{NE, F, E} : std::vector<int64_t>{NE, E, 2 * F});
    if (t.shape != want)
      return Status::error(dir + ": tensor " + t.name + " has shape " + shape_string(t.shape) +
                           ", expected " + shape_string(want) +
                           " (num_local_experts, hidden_size, intermediate_size)");
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
      return Status::error(dir + ": tensor " + t.name + ": dtype " + dtype_name(t.dtype) +
                           " is not a float type");
    Planned planned;
    planned.src = &t;
    planned.stacked = &t;
    planned.part = p.part;
    planned.stacked_bias = p.bias;
    planned.info.name = gguf_tensor_name(p.gguf, l);
    planned.info.shape =
        p.bias ? std::vector<int64_t>{NE, down ? E : F}
               : (down ? std::vector<int64_t>{NE, E, F} : std::vector<int64_t>{NE, F, E});
    out.push_back(std::move(planned));
  }
  return Status::ok();
}

Result<std::vector<Planned>> plan_tensors(const HfConfig& c, const ModelSpec& spec,
                                          const SafetensorsCheckpoint& ckpt, const OutputType& type,
                                          const std::string& dir) {
  const ArchSpec& arch = *spec.arch;
  const NormPlacement norms = spec.hp.norms;
  // HF name -> (role, layer) for every tensor this family may hold.
  std::map<std::string, std::pair<TensorRole, int64_t>, std::less<>> by_hf;
  for (TensorRole r : {TensorRole::kTokenEmbedding, TensorRole::kOutputNorm, TensorRole::kOutput})
    by_hf[hf_tensor_name(r)] = {r, -1};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (TensorRole r : kLayerRoles) {
      const std::string name = hf_tensor_name(r, l, norms);
      if (!name.empty()) by_hf[name] = {r, l};
    }

  // MoE layers: the router by its HF name; each expert's projection into its stack's slot.
  const HParams& hp = spec.hp;
  std::vector<Planned> stacks;
  std::map<std::string, std::pair<size_t, int64_t>, std::less<>> expert_slot;  // -> stack, e
  // gpt-oss: HF's stacked tensors, each split into its GGUF parts when met below.
  std::map<std::string, int64_t, std::less<>> stacked_layer;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!hp.is_moe_layer(l)) continue;
    by_hf[hf_moe_tensor_name(arch, TensorRole::kFfnGateInp, l)] = {TensorRole::kFfnGateInp, l};
    if (arch.moe_biases)
      by_hf[hf_moe_tensor_name(arch, TensorRole::kFfnGateInpBias, l)] = {
          TensorRole::kFfnGateInpBias, l};
    if (arch.hf_moe.stacked) {
      for (TensorRole r : {TensorRole::kFfnGateUpExps, TensorRole::kFfnDownExps,
                           TensorRole::kFfnGateUpExpsBias, TensorRole::kFfnDownExpsBias})
        stacked_layer[hf_moe_tensor_name(arch, r, l)] = l;
      continue;
    }
    for (TensorRole r :
         {TensorRole::kFfnGateExps, TensorRole::kFfnUpExps, TensorRole::kFfnDownExps}) {
      Planned p;
      p.info.name = gguf_tensor_name(r, l);
      p.info.shape = r == TensorRole::kFfnDownExps
                         ? std::vector<int64_t>{hp.n_expert, hp.n_embd, hp.n_ff_exp}
                         : std::vector<int64_t>{hp.n_expert, hp.n_ff_exp, hp.n_embd};
      p.stack.assign(size_t(hp.n_expert), nullptr);
      for (int64_t e = 0; e < hp.n_expert; ++e)
        expert_slot[hf_moe_tensor_name(arch, r, l, e)] = {stacks.size(), e};
      stacks.push_back(std::move(p));
    }
  }

  const bool tied = c.tie_word_embeddings || !ckpt.find_tensor(hf_tensor_name(TensorRole::kOutput));
  std::vector<Planned> out;
  auto generated = [&](TensorRole role, std::vector<float> values) {
    Planned p;
    p.info = {gguf_tensor_name(role), DType::F32, {int64_t(values.size())}, 0};
    p.generated = std::move(values);
    out.push_back(std::move(p));
  };
  if (c.rope.type == "llama3") generated(TensorRole::kRopeFreqs, llama3_rope_factors(c));
  if (c.rope.type == "longrope") {
    auto floats = [](const std::vector<double>& v) {
      return std::vector<float>(v.begin(), v.end());
    };
    generated(TensorRole::kRopeFactorsLong, floats(c.rope.long_factor));
    generated(TensorRole::kRopeFactorsShort, floats(c.rope.short_factor));
  }
  for (const TensorView* t : ckpt.tensors()) {
    if (auto st = stacked_layer.find(t->name); st != stacked_layer.end()) {
      HEARTH_TRY(plan_stacked_experts(arch, hp, *t, st->second, dir, out));
      continue;
    }
    if (auto slot = expert_slot.find(t->name); slot != expert_slot.end()) {
      Planned& p = stacks[slot->second.first];
      const std::vector<int64_t> want(p.info.shape.begin() + 1, p.info.shape.end());
      if (t->shape != want)
        return Status::error(dir + ": tensor " + t->name + " has shape " + shape_string(t->shape) +
                             ", expected " + shape_string(want));
      if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16)
        return Status::error(dir + ": tensor " + t->name + ": dtype " + dtype_name(t->dtype) +
                             " is not a float type");
      p.stack[size_t(slot->second.second)] = t;
      continue;
    }
    auto it = by_hf.find(t->name);
    if (it == by_hf.end()) {
      // Buffers some exporters save; the GGUF derives them from hparams.
      if (t->name.find("rotary_emb.inv_freq") != std::string::npos) continue;
      return Status::error(dir + ": tensor " + t->name + " has no GGUF name for architecture " +
                           arch.gguf_name);
    }
    const auto [role, layer] = it->second;
    if (role == TensorRole::kOutput && tied) continue;  // tied: token_embd doubles as the head
    if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16)
      return Status::error(dir + ": tensor " + t->name + ": dtype " + dtype_name(t->dtype) +
                           " is not a float type");
    Planned p;
    p.src = t;
    p.info.name = gguf_tensor_name(arch, role, layer);
    p.info.shape = t->shape;
    p.plus_one = arch.norm_plus_one && is_norm_role(role);
    if (arch.gguf_rope_style == kernels::RopeStyle::kInterleaved) {
      if (role == TensorRole::kAttnQ) p.permute_heads = c.num_attention_heads;
      if (role == TensorRole::kAttnK) p.permute_heads = c.num_key_value_heads;
    }
    out.push_back(std::move(p));
  }
  for (Planned& p : stacks) {
    for (size_t e = 0; e < p.stack.size(); ++e)
      if (!p.stack[e])
        return Status::error(dir + ": checkpoint lacks expert " + std::to_string(e) + " of " +
                             p.info.name + " (" + std::to_string(p.stack.size()) + " experts)");
    p.src = p.stack[0];  // (a real source: the type rules below apply)
    out.push_back(std::move(p));
  }
  // Every weight the forward pass needs must be there before anything is written.
  auto planned = [&](const std::string& n) {
    for (const auto& p : out)
      if (p.info.name == n) return true;
    return false;
  };
  std::vector<std::vector<std::string>> need = {{gguf_tensor_name(TensorRole::kTokenEmbedding)},
                                                {gguf_tensor_name(TensorRole::kOutputNorm)}};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    auto layer = needed_layer_tensors(spec, l);
    need.insert(need.end(), layer.begin(), layer.end());
    // Separate gate and up, or the fused gate_up (written as ffn_up with both halves).
    const bool fused_ffn = ckpt.find_tensor(hf_tensor_name(TensorRole::kFfnGateUp, l, norms));
    if (!fused_ffn && !hp.is_moe_layer(l))
      need.push_back({gguf_tensor_name(TensorRole::kFfnGate, l)});
  }
  for (const auto& any_of : need) {
    bool found = false;
    for (const auto& n : any_of) found = found || planned(n);
    if (!found) return Status::error(dir + ": checkpoint lacks the tensor for " + any_of[0]);
  }

  ModelFacts facts{c.num_hidden_layers, !tied};
  for (auto& p : out) {
    if (!p.src) continue;
    if (is_weight_matrix(p.info.name, p.info.shape)) {
      const TypeChoice choice = choose_type(type, p.info.name, p.info.shape, facts);
      p.info.dtype = choice.dtype;
      p.fell_back = choice.fell_back;
      p.preferred = choice.preferred;
    } else {
      p.info.dtype = DType::F32;  // norms and biases stay f32, as llama.cpp keeps them
    }
  }
  return out;
}

}  // namespace

Status convert_hf_to_gguf(const std::string& dir, const std::string& out_path,
                          const std::string& type_name, const ConvertProgressFn& progress,
                          int n_threads) {
  HEARTH_ASSIGN_OR_RETURN(OutputType type, parse_output_type(type_name));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::error(dir + ": not a readable directory");
  const std::string cfg_path = dir + "/config.json";
  if (!fs::exists(cfg_path))
    return Status::error(cfg_path + ": missing (not a Hugging Face model directory?)");
  HEARTH_ASSIGN_OR_RETURN(std::string cfg_text, read_text_file(cfg_path));
  HEARTH_ASSIGN_OR_RETURN(HfConfig cfg, parse_hf_config(cfg_text, cfg_path));
  HEARTH_TRY(check_config(cfg, cfg_path));
  if (!find_arch_by_hf(cfg.model_type, cfg.architectures))
    return Status::error(cfg_path + ": model_type: '" + cfg.model_type +
                         "' is not a supported architecture");
  // The same reading and checks the loader applies, so a file it would refuse is not written.
  auto spec_read = read_hf_spec(cfg);
  if (!spec_read.is_ok()) return spec_read.status().with_context(cfg_path);
  const ModelSpec spec = std::move(spec_read).value();
  HEARTH_TRY(check_model_spec(spec).with_context(cfg_path));
  std::optional<HfTokenizerConfig> tok_cfg;
  if (fs::exists(dir + "/tokenizer_config.json")) {
    HEARTH_ASSIGN_OR_RETURN(std::string t, read_text_file(dir + "/tokenizer_config.json"));
    HEARTH_ASSIGN_OR_RETURN(tok_cfg, parse_hf_tokenizer_config(t, dir + "/tokenizer_config.json"));
  }
  HEARTH_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open_dir(dir));
  if (!cfg.text_of.empty()) HEARTH_TRY(ckpt.keep_language_model(cfg.text_of, dir));
  HEARTH_ASSIGN_OR_RETURN(std::vector<Planned> plan, plan_tensors(cfg, spec, ckpt, type, dir));

  uint64_t n_params = 0;
  for (const auto& p : plan) {
    for (const TensorView* t : p.stack) n_params += uint64_t(t->numel());
    if (p.stacked) {  // a part of a stacked HF tensor: count what this GGUF tensor holds
      uint64_t n = 1;
      for (int64_t d : p.info.shape) n *= uint64_t(d);
      n_params += n;
    } else if (p.src && p.stack.empty()) {
      n_params += uint64_t(p.src->numel());
    }
  }
  GgufWriter w;
  HEARTH_TRY(hparam_metadata(cfg, spec, dir, type, n_params, w));
  HEARTH_TRY(add_tokenizer_metadata(dir, cfg, tok_cfg, w));
  w.set_u32("general.quantization_version", 2);

  std::vector<TypeChoice> choices;
  for (const auto& p : plan) {
    w.declare_tensor(p.info.name, p.info.dtype, p.info.shape);
    choices.push_back({p.info.dtype, p.fell_back, p.preferred});
  }
  std::vector<float> f32;
  std::vector<uint8_t> bytes;
  return write_tensors(
      w, out_path, choices, n_threads, progress,
      [&](size_t i, const GgufTensorInfo& info, ThreadPool& pool, GgufTensorStream& out) {
        Planned& p = plan[i];
        if (p.stacked) {  // gpt-oss: expert by expert, de-interleaved and transposed
          f32.clear();
          std::vector<float> one;
          std::vector<uint8_t> raw;
          const int64_t n_expert = p.stacked->shape[0];
          for (int64_t e = 0; e < n_expert; ++e) {
            if (p.stacked_bias) {
              HEARTH_TRY(stacked_expert_bias(*p.stacked, e, p.part, one).with_context(dir));
            } else {
              HEARTH_TRY(stacked_expert_matrix(*p.stacked, e, p.part, raw).with_context(dir));
              TensorView v = *p.stacked;
              v.shape = {info.shape[1], info.shape[2]};
              v.data = raw.data();
              v.nbytes = raw.size();
              HEARTH_TRY(decode_to_f32(v, one).with_context(dir));
            }
            f32.insert(f32.end(), one.begin(), one.end());
          }
        } else if (!p.stack.empty()) {  // experts one after another: [n_expert, rows, cols]
          std::vector<float> one;
          f32.clear();
          for (const TensorView* t : p.stack) {
            HEARTH_TRY(decode_to_f32(*t, one).with_context(dir));
            f32.insert(f32.end(), one.begin(), one.end());
          }
        } else if (p.src) {
          HEARTH_TRY(decode_to_f32(*p.src, f32).with_context(dir));
        } else {
          f32 = std::move(p.generated);
        }
        const int64_t cols = info.shape.back(), rows = int64_t(f32.size()) / cols;
        if (p.plus_one)
          for (float& x : f32) x += 1.0f;
        if (p.permute_heads > 0) {
          HEARTH_TRY(permute_for_interleaved_rope(f32, rows, cols, p.permute_heads)
                         .with_context(dir + ": tensor " + p.src->name));
        }
        HEARTH_TRY(encode_from_f32(info.dtype, f32.data(), rows, cols, bytes, &pool)
                       .with_context(out_path + ": tensor " + info.name));
        return out.write_tensor(bytes.data(), bytes.size());
      });
}

std::string output_type_names() {
  return convert::output_type_list();
}

}  // namespace hearth
