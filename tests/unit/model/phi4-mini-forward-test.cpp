// Phi-4-mini's layout, which no golden covers, against a float64 forward pass written here from
// transformers' Phi3ForCausalLM definition: fused qkv_proj and gate_up_proj, RoPE on the first
// 3/4 of each head (partial_rotary_factor 0.75, rotate_half within those dims), LongRoPE's short
// factors and its attention factor sqrt(1 + ln(max / original) / ln(original)) on cos and sin,
// tied embeddings. Both from the Hugging Face directory and from its converted GGUF. Needs the
// test data (the Llama 2 tokenizer, for the converter).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "model/model.h"
#include "reference-ops.h"
#include "runtime/convert/convert.h"
#include "support/test-data.h"
#include "tiny-model-load.h"
#include "tiny-model.h"

namespace hearth {
namespace {

constexpr int64_t kVocab = 32000, kE = 64, kLayers = 3, kHeads = 4, kKvHeads = 2, kHd = 16,
                  kFf = 96;
constexpr int64_t kRot = 12;  // 16 * 0.75
constexpr double kEps = 1e-5, kTheta = 1e4, kOriginal = 4096, kMaxPos = 131072;
const double kShort[kRot / 2] = {1.0, 1.15, 1.4, 1.9, 2.6, 3.3};
const double kLong[kRot / 2] = {2.0, 4.0, 9.0, 17.0, 30.0, 47.0};

std::string factors(const double (&f)[kRot / 2]) {
  std::string s;
  for (double v : f) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return "[" + s + "]";
}

std::string config() {
  return R"({"model_type": "phi3", "vocab_size": 32000, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": true,
    "hidden_act": "silu", "sliding_window": null, "bos_token_id": 1, "eos_token_id": 2,
    "rope_scaling": {"type": "longrope", "short_factor": )" +
         factors(kShort) + R"(, "long_factor": )" + factors(kLong) + "}}";
}

test::TinyModel make_weights() {
  test::TinyModel m;
  std::mt19937 rng(17);
  const int64_t qkv = (kHeads + 2 * kKvHeads) * kHd;
  m.add("model.embed_tokens.weight", {kVocab, kE}, rng, 0.6f);
  m.add("model.norm.weight", {kE}, rng, 0.1f, 1.0f);
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m.add(p + "input_layernorm.weight", {kE}, rng, 0.1f, 1.0f);
    m.add(p + "post_attention_layernorm.weight", {kE}, rng, 0.1f, 1.0f);
    m.add(p + "self_attn.qkv_proj.weight", {qkv, kE}, rng, 0.6f);
    m.add(p + "self_attn.o_proj.weight", {kE, kHeads * kHd}, rng, 0.3f);
    m.add(p + "mlp.gate_up_proj.weight", {2 * kFf, kE}, rng, 0.3f);
    m.add(p + "mlp.down_proj.weight", {kE, kFf}, rng, 0.3f);
  }
  return m;
}

using test::ref64::Vec;

struct Without {
  bool partial = false, attention_factor = false;
};

// transformers' Phi3ForCausalLM in float64 (sequence within the original context: the short
// factors), logits [T, vocab].
Vec reference(const test::TinyModel& m, const std::vector<int32_t>& ids, Without without = {}) {
  using namespace test::ref64;
  const int64_t T = int64_t(ids.size()), QD = kHeads * kHd, KVD = kKvHeads * kHd;
  auto W = [&](const std::string& n) { return m.w.at(n).data(); };
  // With `partial` left out, every dim rotates (factors for 8 pairs: the short ones, then 1).
  const int64_t rot = without.partial ? kHd : kRot;
  Vec inv_freq;
  for (int64_t i = 0; i < rot / 2; ++i)
    inv_freq.push_back(
        1.0 / ((i < kRot / 2 ? kShort[i] : 1.0) * std::pow(kTheta, double(2 * i) / double(rot))));
  const double mscale = without.attention_factor
                            ? 1.0
                            : std::sqrt(1 + std::log(kMaxPos / kOriginal) / std::log(kOriginal));
  std::vector<Vec> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const float* e = W("model.embed_tokens.weight") + ids[size_t(t)] * kE;
    x[size_t(t)].assign(e, e + kE);
  }
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<Vec> q(static_cast<size_t>(T)), k(q.size()), v(q.size());
    for (int64_t t = 0; t < T; ++t) {
      const Vec h = rms_norm(x[size_t(t)], W(p + "input_layernorm.weight"), kEps, 0.0);
      const Vec qkv = matvec(W(p + "self_attn.qkv_proj.weight"), h, QD + 2 * KVD);
      q[size_t(t)].assign(qkv.begin(), qkv.begin() + QD);
      k[size_t(t)].assign(qkv.begin() + QD, qkv.begin() + QD + KVD);
      v[size_t(t)].assign(qkv.begin() + QD + KVD, qkv.end());
      for (int64_t hh = 0; hh < kHeads; ++hh)
        rope_halves(q[size_t(t)].data() + hh * kHd, rot, inv_freq, t, mscale);
      for (int64_t hh = 0; hh < kKvHeads; ++hh)
        rope_halves(k[size_t(t)].data() + hh * kHd, rot, inv_freq, t, mscale);
    }
    for (int64_t t = 0; t < T; ++t) {
      const Vec att =
          causal_attention(q, k, v, t, 0, kHeads, kKvHeads, kHd, 1.0 / std::sqrt(double(kHd)));
      const Vec o = matvec(W(p + "self_attn.o_proj.weight"), att, kE);
      for (int64_t i = 0; i < kE; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      const Vec h = rms_norm(x[size_t(t)], W(p + "post_attention_layernorm.weight"), kEps, 0.0);
      const Vec gu = matvec(W(p + "mlp.gate_up_proj.weight"), h, 2 * kFf);  // gate, then up
      Vec a(static_cast<size_t>(kFf));
      for (int64_t i = 0; i < kFf; ++i) {
        const double g = gu[size_t(i)];
        a[size_t(i)] = g / (1.0 + std::exp(-g)) * gu[size_t(kFf + i)];
      }
      const Vec d = matvec(W(p + "mlp.down_proj.weight"), a, kE);
      for (int64_t i = 0; i < kE; ++i) x[size_t(t)][size_t(i)] += d[size_t(i)];
    }
  }
  Vec logits;
  for (int64_t t = 0; t < T; ++t) {
    const Vec y = matvec(W("model.embed_tokens.weight"),
                         rms_norm(x[size_t(t)], W("model.norm.weight"), kEps, 0.0), kVocab);
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

TEST(Phi4MiniForward, HfDirAndConvertedGgufMatchTheFloat64Definition) {
  const test::TinyModel m = make_weights();
  const std::string dir = test::temp_dir() + "/tiny-phi4-mini";
  std::filesystem::create_directories(dir);
  m.write(dir);
  std::ofstream(dir + "/config.json") << config();  // (over TinyModel's Llama-style one)
  // The Llama 2 vocabulary (Phi-3's own is a 32,064-entry variant of it), for the converter.
  for (const char* f : {"tokenizer.model", "tokenizer_config.json"})
    std::filesystem::copy_file(test::shared_path(std::string("goldens/llama2-tiny/") + f),
                               dir + "/" + f, std::filesystem::copy_options::overwrite_existing);
  std::mt19937 rng(4);
  std::vector<int32_t> ids(16);
  for (auto& id : ids) id = int32_t(rng() % uint32_t(kVocab));
  const Vec want = reference(m, ids);

  // A prompt of 10, then decode steps; caches of 64 rows, within the original context (short
  // factors).
  const std::vector<float> hf = test::logits_of(dir, ids, 10);
  EXPECT_LE(test::max_row_error(hf, want, kVocab), 1e-4);
  // The case can fail: rotating whole heads, or leaving out the attention factor, gives other
  // logits.
  EXPECT_GT(test::max_row_error(hf, reference(m, ids, {.partial = true}), kVocab), 1e-2);
  EXPECT_GT(test::max_row_error(hf, reference(m, ids, {.attention_factor = true}), kVocab), 1e-2);

  const std::string gguf = test::temp_dir() + "/tiny-phi4-mini-f32.gguf";
  Status s = convert_hf_to_gguf(dir, gguf, "f32", nullptr, 2);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_LE(test::max_row_error(test::logits_of(gguf, ids, 10), want, kVocab), 1e-4);
}

}  // namespace
}  // namespace hearth
