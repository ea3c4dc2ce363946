// config.json and tokenizer_config.json parsing into HfConfig / HfTokenizerConfig. A new field:
// read it with the typed helpers below so a wrong JSON type becomes "file: field: expected ...".
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "formats/hf-config.h"

namespace hearth {

namespace {

using json = nlohmann::json;

const char* json_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a float";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    default:
      return "an unsupported value";
  }
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Typed readers over one JSON object. Absent keys and JSON null both mean "not given" (HF
// writes `"rope_scaling": null`, `"head_dim": null`); a present value of the wrong kind is an
// error naming `prefix + key`.
class Fields {
 public:
  Fields(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  const json* get(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  Status wrong(const char* key, const char* want) const {
    return Status::error(source_ + ": " + prefix_ + key + ": expected " + want + ", got " +
                         json_kind(*get(key)));
  }
  Status missing(const char* key) const {
    return Status::error(source_ + ": " + prefix_ + key + ": required field is missing");
  }

  // Integers; a float with an integral value (e.g. 4096.0 from some exporters) is accepted.
  Result<std::optional<int64_t>> integer(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<int64_t>();
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
        return Status::error(source_ + ": " + prefix_ + key + ": value out of range");
      return std::optional<int64_t>(v->get<int64_t>());
    }
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return std::optional<int64_t>(int64_t(d));
    }
    return wrong(key, "an integer");
  }
  Result<int64_t> required_positive(const char* key) const {
    HEARTH_ASSIGN_OR_RETURN(auto v, integer(key));
    if (!v) return missing(key);
    if (*v <= 0)
      return Status::error(source_ + ": " + prefix_ + key + ": must be positive, got " +
                           std::to_string(*v));
    return *v;
  }
  Result<std::optional<double>> number(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<double>();
    if (!v->is_number()) return wrong(key, "a number");
    return std::optional<double>(v->get<double>());
  }
  Result<std::optional<bool>> boolean(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<bool>();
    if (!v->is_boolean()) return wrong(key, "a boolean");
    return std::optional<bool>(v->get<bool>());
  }
  Result<std::optional<std::string>> string(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<std::string>();
    if (!v->is_string()) return wrong(key, "a string");
    return std::optional<std::string>(v->get<std::string>());
  }
  // A list of numbers (LongRoPE's factors) or strings (layer_types); empty when absent.
  Result<std::vector<double>> numbers(const char* key) const {
    return list<double>(
        key, [](const json& x) { return x.is_number(); }, "a list of numbers");
  }
  Result<std::vector<std::string>> strings(const char* key) const {
    return list<std::string>(
        key, [](const json& x) { return x.is_string(); }, "a list of strings");
  }
  template <typename T, typename IsT>
  Result<std::vector<T>> list(const char* key, IsT is_t, const char* want) const {
    const json* v = get(key);
    std::vector<T> out;
    if (!v) return out;
    if (!v->is_array()) return wrong(key, want);
    for (const json& x : *v) {
      if (!is_t(x)) return wrong(key, want);
      out.push_back(x.get<T>());
    }
    return out;
  }
  // An integer or a list of integers (eos_token_id in Llama 3 configs is a list).
  Result<std::vector<int64_t>> int_or_list(const char* key) const {
    const json* v = get(key);
    std::vector<int64_t> out;
    if (!v) return out;
    if (v->is_number_integer()) {
      out.push_back(v->get<int64_t>());
      return out;
    }
    if (!v->is_array()) return wrong(key, "an integer or a list of integers");
    for (const json& x : *v) {
      if (!x.is_number_integer()) return wrong(key, "an integer or a list of integers");
      out.push_back(x.get<int64_t>());
    }
    return out;
  }

 private:
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

Result<json> parse_object(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Status::error(source + ": malformed JSON: " + one_line(e.what()));
  }
  if (!j.is_object())
    return Status::error(source + ": expected a JSON object at the top level, got " + json_kind(j));
  return j;
}

// Fills `rope` from one rope object: legacy `rope_scaling` or the newer `rope_parameters`
// (which also carries rope_theta). `prefix` names the object in errors.
Status read_rope_object(const json& obj, const std::string& source, const std::string& prefix,
                        HfRope* rope) {
  if (!obj.is_object())
    return Status::error(source + ": " + prefix + ": expected an object, got " + json_kind(obj));
  Fields f(obj, source, prefix + ".");
  HEARTH_ASSIGN_OR_RETURN(auto type, f.string("rope_type"));
  if (!type) {
    HEARTH_ASSIGN_OR_RETURN(type, f.string("type"));  // the older spelling
  }
  if (type) rope->type = *type;
  HEARTH_ASSIGN_OR_RETURN(auto theta, f.number("rope_theta"));
  if (theta) rope->theta = *theta;
  HEARTH_ASSIGN_OR_RETURN(auto factor, f.number("factor"));
  if (factor) {
    if (!(*factor > 0)) return Status::error(source + ": " + prefix + ".factor: must be positive");
    rope->factor = *factor;
  }
  HEARTH_ASSIGN_OR_RETURN(auto low, f.number("low_freq_factor"));
  if (low) rope->low_freq_factor = *low;
  HEARTH_ASSIGN_OR_RETURN(auto high, f.number("high_freq_factor"));
  if (high) rope->high_freq_factor = *high;
  HEARTH_ASSIGN_OR_RETURN(auto orig, f.integer("original_max_position_embeddings"));
  if (orig) rope->original_max_position_embeddings = *orig;
  // YaRN's optional numbers: a later object (rope_parameters) overrides only what it gives.
  const std::pair<const char*, std::optional<double>*> optional_numbers[] = {
      {"beta_fast", &rope->beta_fast},
      {"beta_slow", &rope->beta_slow},
      {"attention_factor", &rope->attention_factor},
      {"mscale", &rope->mscale},
      {"mscale_all_dim", &rope->mscale_all_dim},
      {"partial_rotary_factor", &rope->partial_rotary_factor}};
  for (const auto& [key, dst] : optional_numbers) {
    HEARTH_ASSIGN_OR_RETURN(auto v, f.number(key));
    if (v) *dst = v;
  }
  HEARTH_ASSIGN_OR_RETURN(auto truncate, f.boolean("truncate"));
  if (truncate) rope->truncate = truncate;
  HEARTH_ASSIGN_OR_RETURN(auto long_factor, f.numbers("long_factor"));
  if (!long_factor.empty()) rope->long_factor = long_factor;
  HEARTH_ASSIGN_OR_RETURN(auto short_factor, f.numbers("short_factor"));
  if (!short_factor.empty()) rope->short_factor = short_factor;
  if (rope->type == "llama3" && rope->high_freq_factor <= rope->low_freq_factor)
    return Status::error(source + ": " + prefix +
                         ": llama3 scaling needs high_freq_factor > low_freq_factor");
  return Status::ok();
}

// Special tokens come as "<s>" or as an AddedToken object {"content": "<s>", ...}.
Result<std::string> token_content(const Fields& f, const json& obj, const char* key,
                                  const std::string& source) {
  const json* v = f.get(key);
  if (!v) return std::string();
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) {
    auto c = v->find("content");
    if (c != v->end() && c->is_string()) return c->get<std::string>();
    return Status::error(source + ": " + key + ".content: missing or not a string");
  }
  return f.wrong(key, "a string or an object with \"content\"");
}

// A config.json key and the HfConfig member it fills.
template <class T>
struct KeyField {
  const char* key;
  T HfConfig::*field;
};

// Required, and must be positive.
constexpr KeyField<int64_t> kRequiredSizes[] = {
    {"vocab_size", &HfConfig::vocab_size},
    {"hidden_size", &HfConfig::hidden_size},
    {"intermediate_size", &HfConfig::intermediate_size},
    {"num_hidden_layers", &HfConfig::num_hidden_layers},
    {"num_attention_heads", &HfConfig::num_attention_heads},
};

// Optional, kept as given.
constexpr KeyField<std::optional<int64_t>> kOptionalIntegers[] = {
    {"sliding_window", &HfConfig::sliding_window},
    {"max_window_layers", &HfConfig::max_window_layers},
    {"sliding_window_pattern", &HfConfig::sliding_window_pattern},
    {"num_local_experts", &HfConfig::num_local_experts},
    {"num_experts", &HfConfig::num_experts},
    {"num_experts_per_tok", &HfConfig::num_experts_per_tok},
    {"moe_intermediate_size", &HfConfig::moe_intermediate_size},
    {"decoder_sparse_step", &HfConfig::decoder_sparse_step},
};

// Optional, kept as given.
constexpr KeyField<std::optional<double>> kOptionalNumbers[] = {
    {"query_pre_attn_scalar", &HfConfig::query_pre_attn_scalar},
    {"attn_logit_softcapping", &HfConfig::attn_logit_softcapping},
    {"final_logit_softcapping", &HfConfig::final_logit_softcapping},
    {"partial_rotary_factor", &HfConfig::partial_rotary_factor},
    {"rope_local_base_freq", &HfConfig::rope_local_base_freq},
    {"swiglu_limit", &HfConfig::swiglu_limit},
};

// Optional, kept as given.
constexpr KeyField<std::optional<bool>> kOptionalBooleans[] = {
    {"use_sliding_window", &HfConfig::use_sliding_window},
    {"norm_topk_prob", &HfConfig::norm_topk_prob},
};

// A vision-language checkpoint (Gemma 3 4B and larger, Mistral Small 3.1, LLaVA...) keeps its
// language model's config in text_config: that is the model this engine runs, text only. Keys
// the wrapper holds for both (token ids, tied embeddings) fill in what text_config leaves out.
// (Only Gemma 3's text class has its defaults below: a LLaVA text_config that leaves out
// LlamaConfig's sizes is refused, naming the first missing field.)
// `text` is the object to read; `wrapper` the wrapper's model_type ("" when there is none).
Status unwrap_text_config(json& j, const std::string& source, json& text, std::string& wrapper) {
  auto tc = j.find("text_config");
  if (tc == j.end() || tc->is_null()) {
    text = std::move(j);
    return Status::ok();
  }
  if (!tc->is_object()) return Fields(j, source).wrong("text_config", "an object");
  auto mt = j.find("model_type");
  wrapper = mt != j.end() && mt->is_string() ? mt->get<std::string>() : "vision-language";
  text = std::move(*tc);
  if (!text.contains("model_type")) {
    // transformers' wrapper classes name their text model's class implicitly.
    static const std::pair<const char*, const char*> kTextTypes[] = {
        {"gemma3", "gemma3_text"}, {"mistral3", "mistral"}, {"llava", "llama"}};
    for (const auto& [outer, inner] : kTextTypes)
      if (wrapper == outer) text["model_type"] = inner;
  }
  for (const char* key : {"tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
                          "torch_dtype", "dtype", "transformers_version"})
    if (j.contains(key) && !text.contains(key)) text[key] = j[key];
  return Status::ok();
}

// transformers' config-class defaults for the keys a checkpoint of that class may leave out:
// the class fills them in, so an omitted key means this value, not an error. (Gemma 3's
// published vision-language configs list only a text_config's sizes that differ from these.)
void apply_class_defaults(json& text) {
  static const std::pair<const char*, const char*> kDefaults[] = {
      {"gemma3_text", R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
        "sliding_window": 4096, "sliding_window_pattern": 6, "tie_word_embeddings": true,
        "hidden_activation": "gelu_pytorch_tanh"})"}};
  auto mt = text.find("model_type");
  if (mt == text.end() || !mt->is_string()) return;
  for (const auto& [type, defaults] : kDefaults) {
    if (*mt != type) continue;
    const json table = json::parse(defaults);  // (a named object: items() refers into it)
    for (const auto& [key, value] : table.items())
      if (!text.contains(key)) text[key] = value;
  }
}

}  // namespace

Result<HfConfig> parse_hf_config(const std::string& json_text, const std::string& source) {
  HEARTH_ASSIGN_OR_RETURN(json outer, parse_object(json_text, source));
  json j;
  HfConfig c;
  HEARTH_TRY(unwrap_text_config(outer, source, j, c.text_of));
  apply_class_defaults(j);
  Fields f(j, source, c.text_of.empty() ? "" : "text_config.");

  if (const json* a = f.get("architectures")) {
    if (!a->is_array()) return f.wrong("architectures", "a list of strings");
    for (const json& x : *a) {
      if (!x.is_string()) return f.wrong("architectures", "a list of strings");
      c.architectures.push_back(x.get<std::string>());
    }
  }
  HEARTH_ASSIGN_OR_RETURN(auto model_type, f.string("model_type"));
  c.model_type = model_type.value_or("");

  for (const auto& [key, field] : kRequiredSizes) {
    HEARTH_ASSIGN_OR_RETURN(c.*field, f.required_positive(key));
  }

  HEARTH_ASSIGN_OR_RETURN(auto kv_heads, f.integer("num_key_value_heads"));
  c.num_key_value_heads = kv_heads.value_or(c.num_attention_heads);
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    return Status::error(source +
                         ": num_key_value_heads: " + std::to_string(c.num_key_value_heads) +
                         " must be positive and divide num_attention_heads " +
                         std::to_string(c.num_attention_heads));

  HEARTH_ASSIGN_OR_RETURN(auto head_dim, f.integer("head_dim"));
  if (head_dim) {
    if (*head_dim <= 0)
      return Status::error(source + ": head_dim: must be positive, got " +
                           std::to_string(*head_dim));
    c.head_dim = *head_dim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      return Status::error(source + ": head_dim: missing, and hidden_size " +
                           std::to_string(c.hidden_size) + " is not divisible by " +
                           "num_attention_heads " + std::to_string(c.num_attention_heads));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }

  HEARTH_ASSIGN_OR_RETURN(auto max_pos, f.integer("max_position_embeddings"));
  c.max_position_embeddings = max_pos.value_or(0);
  HEARTH_ASSIGN_OR_RETURN(auto eps, f.number("rms_norm_eps"));
  if (eps) {
    if (!(*eps > 0)) return Status::error(source + ": rms_norm_eps: must be positive");
    c.rms_norm_eps = *eps;
  }
  HEARTH_ASSIGN_OR_RETURN(auto tie, f.boolean("tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(false);
  HEARTH_ASSIGN_OR_RETURN(auto bias, f.boolean("attention_bias"));
  c.attention_bias = bias.value_or(false);
  HEARTH_ASSIGN_OR_RETURN(auto act, f.string("hidden_act"));
  if (act) c.hidden_act = *act;
  // The optional keys kept as they are (absent stays std::nullopt).
  for (const auto& [key, field] : kOptionalIntegers) {
    HEARTH_ASSIGN_OR_RETURN(c.*field, f.integer(key));
  }
  for (const auto& [key, field] : kOptionalNumbers) {
    HEARTH_ASSIGN_OR_RETURN(c.*field, f.number(key));
  }
  for (const auto& [key, field] : kOptionalBooleans) {
    HEARTH_ASSIGN_OR_RETURN(c.*field, f.boolean(key));
  }
  HEARTH_ASSIGN_OR_RETURN(c.layer_types, f.strings("layer_types"));
  HEARTH_ASSIGN_OR_RETURN(auto hidden_activation, f.string("hidden_activation"));
  c.hidden_activation = hidden_activation.value_or("");
  {
    HEARTH_ASSIGN_OR_RETURN(auto only, f.numbers("mlp_only_layers"));
    for (double x : only) {
      if (x != double(int64_t(x)))
        return Status::error(source + ": mlp_only_layers: entries must be integers");
      c.mlp_only_layers.push_back(int64_t(x));
    }
  }
  HEARTH_ASSIGN_OR_RETURN(c.bos_token_ids, f.int_or_list("bos_token_id"));
  HEARTH_ASSIGN_OR_RETURN(c.eos_token_ids, f.int_or_list("eos_token_id"));
  // transformers 5 writes `dtype`; older versions `torch_dtype`.
  HEARTH_ASSIGN_OR_RETURN(auto torch_dtype, f.string("torch_dtype"));
  HEARTH_ASSIGN_OR_RETURN(auto dtype, f.string("dtype"));
  c.torch_dtype = torch_dtype ? *torch_dtype : dtype.value_or("");
  HEARTH_ASSIGN_OR_RETURN(auto tf_version, f.string("transformers_version"));
  if (tf_version) c.transformers_major = std::atoi(tf_version->c_str());

  // RoPE: legacy top-level rope_theta + rope_scaling first, then rope_parameters on top (it is
  // the newer, complete form, so it wins when both are present).
  HEARTH_ASSIGN_OR_RETURN(auto theta, f.number("rope_theta"));
  if (theta) c.rope.theta = *theta;
  if (const json* rs = f.get("rope_scaling"))
    HEARTH_TRY(read_rope_object(*rs, source, "rope_scaling", &c.rope));
  if (const json* rp = f.get("rope_parameters")) {
    // Models with several attention kinds nest one object per kind; the full-attention one is
    // the one a Llama-family forward pass uses.
    if (rp->is_object() && !rp->contains("rope_type") && !rp->contains("rope_theta") &&
        rp->contains("full_attention")) {
      HEARTH_TRY(read_rope_object(rp->at("full_attention"), source,
                                  "rope_parameters.full_attention", &c.rope));
      if (rp->contains("sliding_attention")) {
        HfRope local;
        HEARTH_TRY(read_rope_object(rp->at("sliding_attention"), source,
                                    "rope_parameters.sliding_attention", &local));
        c.rope_local = local;
      }
    } else
      HEARTH_TRY(read_rope_object(*rp, source, "rope_parameters", &c.rope));
  }
  if (!(c.rope.theta > 0)) return Status::error(source + ": rope_theta: must be positive");
  if (c.rope.partial_rotary_factor && !c.partial_rotary_factor)
    c.partial_rotary_factor = c.rope.partial_rotary_factor;
  if (c.rope.original_max_position_embeddings == 0) {
    HEARTH_ASSIGN_OR_RETURN(auto orig, f.integer("original_max_position_embeddings"));
    if (orig) c.rope.original_max_position_embeddings = *orig;
  }
  return c;
}

Result<HfTokenizerConfig> parse_hf_tokenizer_config(const std::string& json_text,
                                                    const std::string& source) {
  HEARTH_ASSIGN_OR_RETURN(json j, parse_object(json_text, source));
  Fields f(j, source);
  HfTokenizerConfig t;
  HEARTH_ASSIGN_OR_RETURN(t.add_bos_token, f.boolean("add_bos_token"));
  HEARTH_ASSIGN_OR_RETURN(t.add_eos_token, f.boolean("add_eos_token"));
  HEARTH_ASSIGN_OR_RETURN(t.bos_token, token_content(f, j, "bos_token", source));
  HEARTH_ASSIGN_OR_RETURN(t.eos_token, token_content(f, j, "eos_token", source));
  HEARTH_ASSIGN_OR_RETURN(t.unk_token, token_content(f, j, "unk_token", source));
  HEARTH_ASSIGN_OR_RETURN(t.pad_token, token_content(f, j, "pad_token", source));
  HEARTH_ASSIGN_OR_RETURN(auto cls, f.string("tokenizer_class"));
  t.tokenizer_class = cls.value_or("");

  if (const json* ct = f.get("chat_template")) {
    if (ct->is_string()) {
      t.chat_template = ct->get<std::string>();
    } else if (ct->is_array()) {
      // A list of named templates: "default" is the chat one (others are e.g. "tool_use").
      std::string first;
      bool found = false;
      for (const json& e : *ct) {
        if (!e.is_object() || !e.contains("name") || !e.contains("template") ||
            !e["name"].is_string() || !e["template"].is_string())
          return Status::error(source +
                               ": chat_template: list entries must be {\"name\", \"template\"}");
        if (first.empty()) first = e["template"].get<std::string>();
        if (e["name"] == "default") {
          t.chat_template = e["template"].get<std::string>();
          found = true;
        }
      }
      if (!found) t.chat_template = first;
    } else {
      return f.wrong("chat_template", "a string or a list of {name, template}");
    }
  }

  // HF writes int(1e30) ("no limit") here, which JSON parsers read as a float: treat anything
  // beyond int64 as unset (0).
  if (const json* m = f.get("model_max_length")) {
    if (!m->is_number()) return f.wrong("model_max_length", "a number");
    if (m->is_number_integer() && !(m->is_number_unsigned() && m->get<uint64_t>() > INT64_MAX))
      t.model_max_length = m->get<int64_t>();
    else if (m->is_number_float() && m->get<double>() >= 0 && m->get<double>() < 9.2e18)
      t.model_max_length = int64_t(m->get<double>());
    if (t.model_max_length < 0)
      return Status::error(source + ": model_max_length: must not be negative");
  }
  return t;
}

}  // namespace hearth
