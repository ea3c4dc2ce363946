// Writes random-weight GGUFs of real Llama shapes. The random bytes come from one buffer that
// every tensor references at a different offset (GgufWriter::add_tensor_ref), so writing a 7B
// model needs one large tensor's worth of memory, not the model's.
#include "synthetic-model.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "base/half.h"
#include "formats/gguf.h"

namespace hearth::bench {

namespace {

// A SentencePiece-style vocabulary of exactly n_vocab tokens (<unk>, <s>, </s>, the 256 byte
// tokens, then placeholder pieces), so the file carries the tokenizer every GGUF reader expects
// and other engines (llama.cpp's llama-bench) load the same file the bench measures. Its pieces
// tokenize nothing in particular: the benches feed token ids.
void write_placeholder_vocab(GgufWriter& w, int64_t n_vocab) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // llama.cpp's token types: 1 normal, 2 unknown, 3 control, 6 byte
  tokens.reserve(size_t(n_vocab));
  const auto add = [&](std::string piece, float score, int32_t type) {
    tokens.push_back(std::move(piece));
    scores.push_back(score);
    types.push_back(type);
  };
  add("<unk>", 0.f, 2);
  add("<s>", 0.f, 3);
  add("</s>", 0.f, 3);
  char buf[16];
  for (int b = 0; b < 256 && int64_t(tokens.size()) < n_vocab; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0.f, 6);
  }
  while (int64_t(tokens.size()) < n_vocab) {
    const int64_t i = int64_t(tokens.size());
    add("\u2581t" + std::to_string(i), -float(i), 1);
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
}

SyntheticShape qwen3_8b() {  // Qwen3-8B's config.json
  SyntheticShape s{"qwen3-8b", 4096, 12288, 36, 32, 8, 151936, 40960, 1000000.0};
  s.arch = "qwen3", s.head_dim = 128, s.qk_norm = true, s.rms_eps = 1e-6;
  return s;
}

SyntheticShape gemma2_9b() {  // gemma-2-9b's config.json (query_pre_attn_scalar = head_dim)
  SyntheticShape s{"gemma2-9b", 3584, 14336, 42, 16, 8, 256000, 8192, 10000.0};
  s.arch = "gemma2", s.head_dim = 256, s.sandwich_norms = true, s.tied_output = true;
  s.sliding_window = 4096, s.attn_softcap = 50.f, s.final_softcap = 30.f, s.rms_eps = 1e-6;
  return s;
}

// gemma-3-12b-it's and gemma-3-27b-it's text configs: five sliding layers (1024 positions, RoPE
// base 10000, the family's defaults for GGUF) to one global, per-head q/k norms, sandwich norms,
// no soft-caps, tied LM head; head_dim 256 and 128.
SyntheticShape gemma3(const char* name, int64_t embd, int64_t ff, int64_t layers, int64_t heads,
                      int64_t kv_heads, int64_t head_dim) {
  SyntheticShape s{name, embd, ff, layers, heads, kv_heads, 262208, 131072, 1000000.0};
  s.arch = "gemma3", s.head_dim = head_dim, s.qk_norm = true, s.sandwich_norms = true;
  s.tied_output = true, s.sliding_window = 1024, s.rms_eps = 1e-6;
  return s;
}

// Qwen3-30B-A3B's config.json: 128 experts of width 768, 8 per token, norm_topk_prob.
SyntheticShape qwen3_30b_a3b() {
  SyntheticShape s{"qwen3-30b-a3b", 2048, 6144, 48, 32, 4, 151936, 40960, 1000000.0};
  s.arch = "qwen3moe", s.head_dim = 128, s.qk_norm = true, s.rms_eps = 1e-6;
  s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 768;
  return s;
}

// gpt-oss-20b's config.json: 32 experts of width 2880 (MXFP4, as OpenAI ships them and
// llama.cpp converts them), 4 per token, every other layer sliding over 128 positions, YaRN x32
// over 4,096. Its width of 2880 is not whole K-quant super-blocks: f16, bf16, q8_0, q4_0.
SyntheticShape gpt_oss_20b() {
  SyntheticShape s{"gpt-oss-20b", 2880, 2880, 24, 64, 8, 201088, 131072, 150000.0};
  s.arch = "gpt-oss", s.head_dim = 64, s.sliding_window = 128;
  s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 2880;
  s.attn_biases = s.attn_sinks = s.moe_biases = true;
  s.yarn_factor = 32, s.yarn_orig_ctx = 4096;
  s.expert_type = DType::MXFP4;
  s.ffn_norm = "post_attention_norm.weight";
  return s;
}

// A CPU-sized Qwen3-MoE (128 experts, top-8, head_dim 128, q/k norms; expert width 512 = hidden
// / 2, the nearest to 30B-A3B's 0.375 that K-quant blocks allow) and its dense twin: the same
// attention and a dense FFN of 8 x 512, so both read the same bytes per token (the MoE adds only
// its 128-row router). A 32000-token vocabulary keeps the shared LM head at ~10% of those bytes,
// as in 30B-A3B (Qwen's 151936 would make it a third at this width and hide the FFN).
SyntheticShape qwen3_moe_mini() {
  SyntheticShape s{"qwen3-moe-mini", 1024, 4096, 16, 16, 4, 32000, 40960, 1000000.0};
  s.arch = "qwen3moe", s.head_dim = 128, s.qk_norm = true, s.rms_eps = 1e-6;
  s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 512;
  return s;
}
SyntheticShape qwen3_moe_mini_dense() {
  SyntheticShape s = qwen3_moe_mini();
  s.name = "qwen3-moe-mini-dense", s.arch = "qwen3";
  s.n_expert = 0, s.n_expert_used = 0, s.n_ff_exp = 0;
  return s;
}

// Shapes as in mkgguf.py (llama3-8b with its real 128256-token vocabulary), and two 2025
// families with their real vocabularies.
const SyntheticShape kShapes[] = {
    {"tinyllama-1b", 2048, 5632, 22, 32, 4, 32000, 2048, 10000.0},
    {"llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 10000.0},
    {"llama3-8b", 4096, 14336, 32, 32, 8, 128256, 8192, 500000.0},
    qwen3_8b(),
    gemma2_9b(),
    gemma3("gemma3-12b", 3840, 15360, 48, 16, 8, 256),
    gemma3("gemma3-27b", 5376, 21504, 62, 32, 16, 128),
    qwen3_30b_a3b(),
    gpt_oss_20b(),
    qwen3_moe_mini(),
    qwen3_moe_mini_dense(),
};

const DType kTypes[] = {DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// xorshift64*: fast and good enough for weights nobody reads for meaning.
void fill_random(uint8_t* p, uint64_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const uint64_t v = s * 0x2545F4914F6CDD1Dull;
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = uint8_t(i * 131 + seed);
}

// Makes random bytes valid, well-scaled blocks of type t: scale fields 0.002 (fp16), floats
// near +-1/64 (the bit masks of mkgguf.py).
void make_valid(DType t, uint8_t* p, uint64_t n_bytes) {
  const DTypeInfo& info = dtype_info(t);
  const uint16_t d = f32_to_fp16(0.002f);
  if (t == DType::F16 || t == DType::BF16) {
    for (uint64_t i = 0; i + 2 <= n_bytes; i += 2) {
      uint16_t v;
      std::memcpy(&v, p + i, 2);
      v = t == DType::F16 ? uint16_t((v & 0x83FF) | 0x2400) : uint16_t((v & 0x807F) | 0x3C80);
      std::memcpy(p + i, &v, 2);
    }
    return;
  }
  // Offsets of the fp16 scale fields inside each block.
  std::vector<int> fields;
  if (t == DType::Q4_0 || t == DType::Q8_0) fields = {0};
  if (t == DType::Q4_K || t == DType::Q5_K) fields = {0, 2};
  if (t == DType::Q6_K) fields = {208};
  for (uint64_t b = 0; b + info.block_bytes <= n_bytes; b += info.block_bytes)
    for (int off : fields) std::memcpy(p + b + uint64_t(off), &d, 2);
  // MXFP4: an E8M0 scale byte first; 2^-8 keeps its codes (up to +-6) near the others' range.
  if (t == DType::MXFP4)
    for (uint64_t b = 0; b + info.block_bytes <= n_bytes; b += info.block_bytes) p[b] = 119;
}

}  // namespace

std::vector<std::string> synthetic_shape_names() {
  std::vector<std::string> names;
  for (const auto& s : kShapes) names.push_back(s.name);
  return names;
}

Result<SyntheticSpec> parse_synthetic(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos)
    return Status::error("--synthetic: expected SHAPE:TYPE (e.g. llama2-7b:q4_0), got '" + text +
                         "'");
  const std::string shape = lower(text.substr(0, colon)), type = lower(text.substr(colon + 1));
  SyntheticSpec spec{};
  bool found = false;
  for (const auto& s : kShapes)
    if (s.name == shape) {
      spec.shape = s;
      found = true;
    }
  if (!found) {
    std::string names;
    for (const auto& n : synthetic_shape_names()) names += (names.empty() ? "" : ", ") + n;
    return Status::error("--synthetic: unknown shape '" + shape + "' (known: " + names + ")");
  }
  spec.k_m_mix = type == "q4_k_m" || type == "q5_k_m";
  const auto t = dtype_from_name(spec.k_m_mix ? type.substr(0, 4) : type);
  if (!t || std::find(std::begin(kTypes), std::end(kTypes), *t) == std::end(kTypes))
    return Status::error("--synthetic: type '" + type +
                         "' is not one of f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m");
  spec.type = *t;
  return spec;
}

std::string synthetic_type_name(const SyntheticSpec& spec) {
  return lower(dtype_name(spec.type)) + (spec.k_m_mix ? "_m" : "");
}

namespace {

// llama-quantize's choice of layers that get more bits in its _M mixes: the first and last
// eighth of the layers and every third layer between.
bool more_bits_layer(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

}  // namespace

Result<uint64_t> write_synthetic_gguf(const SyntheticSpec& spec, const std::string& path,
                                      uint64_t seed) {
  const SyntheticShape& s = spec.shape;
  const int64_t E = s.n_embd, F = s.n_ff, V = s.n_vocab;
  const int64_t hd = s.head_dim > 0 ? s.head_dim : E / s.n_head;
  const int64_t qd = hd * s.n_head, kvd = hd * s.n_head_kv;
  const std::string a = s.arch + ".";
  GgufWriter w;
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", "synthetic-" + s.name + "-" + synthetic_type_name(spec));
  w.set_u32("general.alignment", 64);
  w.set_u32(a + "context_length", uint32_t(s.n_ctx));
  w.set_u32(a + "embedding_length", uint32_t(E));
  w.set_u32(a + "block_count", uint32_t(s.n_layer));
  w.set_u32(a + "feed_forward_length", uint32_t(F));
  w.set_u32(a + "rope.dimension_count", uint32_t(hd));
  w.set_f32(a + "rope.freq_base", float(s.rope_theta));
  w.set_u32(a + "attention.head_count", uint32_t(s.n_head));
  w.set_u32(a + "attention.head_count_kv", uint32_t(s.n_head_kv));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", float(s.rms_eps));
  if (s.head_dim > 0) {
    w.set_u32(a + "attention.key_length", uint32_t(hd));
    w.set_u32(a + "attention.value_length", uint32_t(hd));
  }
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", uint32_t(s.sliding_window));
  if (s.attn_softcap > 0) w.set_f32(a + "attn_logit_softcapping", s.attn_softcap);
  if (s.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", s.final_softcap);
  const int64_t NE = s.n_expert, FE = s.n_ff_exp;
  if (s.yarn_factor > 0) {
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", float(s.yarn_factor));
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(s.yarn_orig_ctx));
  }
  if (NE > 0) {
    w.set_u32(a + "expert_count", uint32_t(NE));
    w.set_u32(a + "expert_used_count", uint32_t(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", uint32_t(FE));
    w.set_bool(a + "expert_weights_norm", true);
  }
  write_placeholder_vocab(w, V);

  struct T {
    std::string name;
    std::vector<int64_t> shape;  // outermost first
    DType type;
  };
  const DType expert_type = s.expert_type == DType::F32 ? spec.type : s.expert_type;
  // The mix's Q6_K tensors: the LM head, and attn_v / ffn_down on the more-bits layers (the
  // experts' ffn_down too, unless they have a type of their own).
  const DType head_type = spec.k_m_mix ? DType::Q6_K : spec.type;
  auto mixed = [&](int64_t l, DType t) {
    return spec.k_m_mix && t == spec.type && more_bits_layer(l, s.n_layer) ? DType::Q6_K : t;
  };
  std::vector<T> mats = {{"token_embd.weight", {V, E}, s.tied_output ? head_type : spec.type}};
  if (!s.tied_output) mats.push_back({"output.weight", {V, E}, head_type});
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    mats.insert(mats.end(), {{p + "attn_q.weight", {qd, E}, spec.type},
                             {p + "attn_k.weight", {kvd, E}, spec.type},
                             {p + "attn_v.weight", {kvd, E}, mixed(l, spec.type)},
                             {p + "attn_output.weight", {E, qd}, spec.type}});
    if (NE > 0) {
      mats.insert(mats.end(), {{p + "ffn_gate_inp.weight", {NE, E}, spec.type},
                               {p + "ffn_gate_exps.weight", {NE, FE, E}, expert_type},
                               {p + "ffn_up_exps.weight", {NE, FE, E}, expert_type},
                               {p + "ffn_down_exps.weight", {NE, E, FE}, mixed(l, expert_type)}});
    } else {
      mats.insert(mats.end(), {{p + "ffn_gate.weight", {F, E}, spec.type},
                               {p + "ffn_up.weight", {F, E}, spec.type},
                               {p + "ffn_down.weight", {E, F}, mixed(l, spec.type)}});
    }
  }
  // A tensor's bytes: whole rows of its innermost dimension.
  auto tensor_bytes = [&](const T& t) -> std::optional<uint64_t> {
    const auto row = row_bytes(t.type, uint64_t(t.shape.back()));
    if (!row) return std::nullopt;
    uint64_t rows = 1;
    for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= uint64_t(t.shape[d]);
    return *row * rows;
  };
  std::map<DType, uint64_t> largest;  // per type: its largest tensor
  for (const T& t : mats) {
    const auto bytes = tensor_bytes(t);
    if (!bytes)
      return Status::error("synthetic: " + s.name + "'s " + t.name + " rows (" +
                           std::to_string(t.shape.back()) + ") are not whole " +
                           dtype_name(t.type) + " blocks");
    uint64_t& big = largest[t.type];
    big = std::max(big, *bytes);
  }
  // Tensors start at different block offsets of one random buffer per type, so layers differ.
  const uint64_t slack_blocks = 4096;
  std::map<DType, std::vector<uint8_t>> pools;
  uint64_t pool_seed = seed;
  for (const auto& [t, big] : largest) {
    std::vector<uint8_t>& pool = pools[t];
    pool.resize(big + slack_blocks * dtype_info(t).block_bytes);
    fill_random(pool.data(), pool.size(), pool_seed++);
    make_valid(t, pool.data(), pool.size());
  }
  std::vector<float> ones(size_t(std::max(E, hd)), 1.f);
  // Biases and sinks: zeros, the largest being an expert bias table.
  std::vector<float> zeros(size_t(std::max({E, qd, NE * std::max(FE, E)})), 0.f);
  auto add_f32 = [&](const std::string& name, std::vector<int64_t> shape, const float* data) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= uint64_t(d);
    w.add_tensor_ref(name, DType::F32, std::move(shape), data, n * 4);
  };
  w.add_tensor_ref("output_norm.weight", DType::F32, {E}, ones.data(), uint64_t(E) * 4);
  uint64_t i = 0;
  for (const T& t : mats) {
    const uint64_t bytes = *tensor_bytes(t);
    const std::vector<uint8_t>& pool = pools[t.type];
    const uint64_t off = (i++ * 1031 % slack_blocks) * dtype_info(t.type).block_bytes;
    w.add_tensor_ref(t.name, t.type, t.shape, pool.data() + off, bytes);
    if (t.name.find("attn_q.weight") != std::string::npos) {
      const std::string p = t.name.substr(0, t.name.size() - std::string("attn_q.weight").size());
      if (s.attn_biases) {
        add_f32(p + "attn_q.bias", {qd}, zeros.data());
        add_f32(p + "attn_k.bias", {kvd}, zeros.data());
        add_f32(p + "attn_v.bias", {kvd}, zeros.data());
        add_f32(p + "attn_output.bias", {E}, zeros.data());
      }
      if (s.attn_sinks) add_f32(p + "attn_sinks.weight", {s.n_head}, zeros.data());
      if (s.moe_biases && NE > 0) {
        add_f32(p + "ffn_gate_inp.bias", {NE}, zeros.data());
        add_f32(p + "ffn_gate_exps.bias", {NE, FE}, zeros.data());
        add_f32(p + "ffn_up_exps.bias", {NE, FE}, zeros.data());
        add_f32(p + "ffn_down_exps.bias", {NE, E}, zeros.data());
      }
      std::vector<std::pair<std::string, int64_t>> norms = {{"attn_norm.weight", E},
                                                            {s.ffn_norm, E}};
      if (s.qk_norm)
        norms.insert(norms.end(), {{"attn_q_norm.weight", hd}, {"attn_k_norm.weight", hd}});
      if (s.sandwich_norms)
        norms.insert(norms.end(), {{"post_attention_norm.weight", E}, {"post_ffw_norm.weight", E}});
      for (const auto& [n, len] : norms)
        w.add_tensor_ref(p + n, DType::F32, {len}, ones.data(), uint64_t(len) * 4);
    }
  }
  HEARTH_TRY(w.write(path));
  std::error_code ec;
  return uint64_t(std::filesystem::file_size(path, ec));
}

}  // namespace hearth::bench
