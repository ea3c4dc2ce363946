// HF directory -> GGUF: hparams as {arch}.* keys, tokenizer metadata, weights renamed to GGUF
// names, Q/K permuted for "llama", llama3 rope factors as rope_freqs.weight. One tensor in
// memory at a time. A new hparam key: add it in hparam_metadata().
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>

#include "base/mapped-file.h"
#include "formats/safetensors.h"
#include "model/arch.h"
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

Status hparam_metadata(const HfConfig& c, const ArchSpec& arch, const std::string& dir,
                       const OutputType& type, uint64_t n_params, GgufWriter& w) {
  const std::string a = arch.gguf_name + ".";
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
  w.set_f32(a + "rope.freq_base", float(c.rope.theta));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  if (c.rope.type == "linear") {
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_f32(a + "rope.scaling.factor", float(c.rope.factor));
  } else if (c.rope.type != "default" && c.rope.type != "llama3") {
    return Status::error(dir + "/config.json: rope_scaling: type '" + c.rope.type +
                         "' is not supported (default, linear, llama3)");
  }
  w.set_u32("general.file_type", type.file_type);
  w.set_u32(a + "vocab_size", uint32_t(c.vocab_size));
  w.set_u32(a + "rope.dimension_count", uint32_t(c.head_dim));
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {
    w.set_u32(a + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(a + "attention.value_length", uint32_t(c.head_dim));
  }
  return Status::ok();
}

// One output tensor: where it comes from and how it is written.
struct Planned {
  GgufTensorInfo info;              // nbytes unused: the writer derives it
  const TensorView* src = nullptr;  // null for generated tensors (rope_freqs)
  std::vector<float> generated;
  int64_t permute_heads = 0;  // > 0: permute rows for interleaved RoPE with this head count
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

Result<std::vector<Planned>> plan_tensors(const HfConfig& c, const ArchSpec& arch,
                                          const SafetensorsCheckpoint& ckpt, const OutputType& type,
                                          const std::string& dir) {
  // HF name -> (role, layer) for every tensor this family may hold.
  std::map<std::string, std::pair<TensorRole, int64_t>, std::less<>> by_hf;
  for (TensorRole r : {TensorRole::kTokenEmbedding, TensorRole::kOutputNorm, TensorRole::kOutput})
    by_hf[hf_tensor_name(r)] = {r, -1};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (TensorRole r : kLayerRoles) by_hf[hf_tensor_name(r, l)] = {r, l};

  const bool tied = c.tie_word_embeddings || !ckpt.find_tensor(hf_tensor_name(TensorRole::kOutput));
  std::vector<Planned> out;
  if (c.rope.type == "llama3") {
    Planned p;
    p.generated = llama3_rope_factors(c);
    p.info = {
        gguf_tensor_name(TensorRole::kRopeFreqs), DType::F32, {int64_t(p.generated.size())}, 0};
    out.push_back(std::move(p));
  }
  for (const TensorView* t : ckpt.tensors()) {
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
    p.info.name = gguf_tensor_name(role, layer);
    p.info.shape = t->shape;
    if (arch.gguf_rope_style == kernels::RopeStyle::kInterleaved) {
      if (role == TensorRole::kAttnQ) p.permute_heads = c.num_attention_heads;
      if (role == TensorRole::kAttnK) p.permute_heads = c.num_key_value_heads;
    }
    out.push_back(std::move(p));
  }
  // Every weight the forward pass needs must be there before anything is written.
  std::vector<std::string> need = {gguf_tensor_name(TensorRole::kTokenEmbedding),
                                   gguf_tensor_name(TensorRole::kOutputNorm)};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (TensorRole r : {TensorRole::kAttnNorm, TensorRole::kAttnQ, TensorRole::kAttnK,
                         TensorRole::kAttnV, TensorRole::kAttnOut, TensorRole::kFfnNorm,
                         TensorRole::kFfnGate, TensorRole::kFfnUp, TensorRole::kFfnDown})
      need.push_back(gguf_tensor_name(r, l));
  for (const auto& n : need) {
    bool found = false;
    for (const auto& p : out) found = found || p.info.name == n;
    if (!found) return Status::error(dir + ": checkpoint lacks the tensor for " + n);
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
  const ArchSpec* arch = find_arch_by_hf(cfg.model_type, cfg.architectures);
  if (!arch)
    return Status::error(cfg_path + ": model_type: '" + cfg.model_type +
                         "' is not a supported architecture");
  std::optional<HfTokenizerConfig> tok_cfg;
  if (fs::exists(dir + "/tokenizer_config.json")) {
    HEARTH_ASSIGN_OR_RETURN(std::string t, read_text_file(dir + "/tokenizer_config.json"));
    HEARTH_ASSIGN_OR_RETURN(tok_cfg, parse_hf_tokenizer_config(t, dir + "/tokenizer_config.json"));
  }
  HEARTH_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::open_dir(dir));
  HEARTH_ASSIGN_OR_RETURN(std::vector<Planned> plan, plan_tensors(cfg, *arch, ckpt, type, dir));

  uint64_t n_params = 0;
  for (const auto& p : plan)
    if (p.src) n_params += uint64_t(p.src->numel());
  GgufWriter w;
  HEARTH_TRY(hparam_metadata(cfg, *arch, dir, type, n_params, w));
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
        if (p.src) {
          HEARTH_TRY(decode_to_f32(*p.src, f32).with_context(dir));
        } else {
          f32 = std::move(p.generated);
        }
        const int64_t cols = info.shape.back(), rows = int64_t(f32.size()) / cols;
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
