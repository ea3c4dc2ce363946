// Gemma 3 (text), which no golden covers, against a float64 forward pass written here from
// transformers' Gemma3ForCausalLM definition: (1 + w) RMSNorms, the sandwich (pre- and
// post-norms around attention and the MLP), per-head q/k norms before RoPE, the embedding scale
// sqrt(hidden), query_pre_attn_scalar, five sliding layers (window 4) to one global, the local
// RoPE base on sliding layers and the global base with linear scaling on global ones, and the
// GELU-tanh gate. A prompt longer than the window, then decode steps through the ring cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include "model/model.h"
#include "reference-ops.h"
#include "runtime/convert/convert.h"
#include "support/test-data.h"
#include "tiny-model-load.h"
#include "tiny-model.h"

namespace hearth {
namespace {

constexpr int64_t kVocab = 32000, kE = 64, kLayers = 6, kHeads = 4, kKvHeads = 2, kHd = 32,
                  kFf = 96;
constexpr int64_t kWindow = 4, kPattern = 6;
constexpr double kEps = 1e-6, kQueryScalar = 24, kGlobalTheta = 1e6, kLocalTheta = 1e4;
constexpr double kLinearFactor = 8;

// The text model's config; without the model_type as a vision-language checkpoint's
// text_config may be.
std::string config(bool with_model_type = true) {
  return std::string(with_model_type ? R"({"model_type": "gemma3_text", )" : "{") +
         R"("vocab_size": 32000, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 6, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06, "sliding_window": 4, "sliding_window_pattern": 6,
    "query_pre_attn_scalar": 24, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "tie_word_embeddings": false,
    "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": null,
    "attn_logit_softcapping": null})";
}

test::TinyModel make_weights() {
  test::TinyModel m;
  std::mt19937 rng(31);
  const int64_t qd = kHeads * kHd, kvd = kKvHeads * kHd;
  m.add("model.embed_tokens.weight", {kVocab, kE}, rng, 1.0f);
  m.add("lm_head.weight", {kVocab, kE}, rng, 0.3f);
  m.add("model.norm.weight", {kE}, rng, 0.3f);  // (1 + w): weights around 0
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm",
                          "pre_feedforward_layernorm", "post_feedforward_layernorm"})
      m.add(p + n + ".weight", {kE}, rng, 0.3f);
    m.add(p + "self_attn.q_norm.weight", {kHd}, rng, 0.3f);
    m.add(p + "self_attn.k_norm.weight", {kHd}, rng, 0.3f);
    m.add(p + "self_attn.q_proj.weight", {qd, kE}, rng, 0.6f);
    m.add(p + "self_attn.k_proj.weight", {kvd, kE}, rng, 0.6f);
    m.add(p + "self_attn.v_proj.weight", {kvd, kE}, rng, 0.3f);
    m.add(p + "self_attn.o_proj.weight", {kE, qd}, rng, 0.3f);
    m.add(p + "mlp.gate_proj.weight", {kFf, kE}, rng, 0.3f);
    m.add(p + "mlp.up_proj.weight", {kFf, kE}, rng, 0.3f);
    m.add(p + "mlp.down_proj.weight", {kE, kFf}, rng, 0.3f);
  }
  return m;
}

using test::ref64::Vec;

// What to leave out of the reference, so a test can show the engine's answer depends on it.
struct Without {
  bool window = false, linear_scaling = false;
};

// transformers' Gemma3ForCausalLM in float64, logits [T, vocab] for positions 0..T-1.
Vec reference(const test::TinyModel& m, const std::vector<int32_t>& ids, Without without = {}) {
  using namespace test::ref64;
  const int64_t T = int64_t(ids.size());
  auto W = [&](const std::string& n) { return m.w.at(n).data(); };
  auto normed = [&](const Vec& x, const std::string& w) { return rms_norm(x, W(w), kEps, 1.0); };
  auto gelu_tanh = [](double g) {
    return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
  };
  std::vector<Vec> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const float* e = W("model.embed_tokens.weight") + ids[size_t(t)] * kE;
    for (int64_t i = 0; i < kE; ++i) x[size_t(t)].push_back(double(e[i]) * std::sqrt(double(kE)));
  }
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const bool sliding = (l + 1) % kPattern != 0;
    const double theta = sliding ? kLocalTheta : kGlobalTheta;
    const double factor = sliding || without.linear_scaling ? 1.0 : kLinearFactor;
    Vec inv_freq;
    for (int64_t i = 0; i < kHd / 2; ++i)
      inv_freq.push_back(1.0 / std::pow(theta, double(2 * i) / double(kHd)) / factor);
    std::vector<Vec> q(static_cast<size_t>(T)), k(q.size()), v(q.size());
    for (int64_t t = 0; t < T; ++t) {
      const Vec h = normed(x[size_t(t)], p + "input_layernorm.weight");
      q[size_t(t)] = matvec(W(p + "self_attn.q_proj.weight"), h, kHeads * kHd);
      k[size_t(t)] = matvec(W(p + "self_attn.k_proj.weight"), h, kKvHeads * kHd);
      v[size_t(t)] = matvec(W(p + "self_attn.v_proj.weight"), h, kKvHeads * kHd);
      for (auto [vec, n_heads, wn] : {std::tuple{&q[size_t(t)], kHeads, "q_norm"},
                                      std::tuple{&k[size_t(t)], kKvHeads, "k_norm"}})
        for (int64_t hh = 0; hh < n_heads; ++hh) {
          double* head = vec->data() + hh * kHd;
          rms_norm(head, kHd, W(p + "self_attn." + wn + ".weight"), kEps, 1.0, head);
          rope_halves(head, kHd, inv_freq, t);
        }
    }
    for (int64_t t = 0; t < T; ++t) {
      const int64_t first = sliding && !without.window ? std::max<int64_t>(0, t - kWindow + 1) : 0;
      const Vec att =
          causal_attention(q, k, v, t, first, kHeads, kKvHeads, kHd, 1.0 / std::sqrt(kQueryScalar));
      const Vec o = normed(matvec(W(p + "self_attn.o_proj.weight"), att, kE),
                           p + "post_attention_layernorm.weight");
      for (int64_t i = 0; i < kE; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      const Vec h = normed(x[size_t(t)], p + "pre_feedforward_layernorm.weight");
      const Vec g = matvec(W(p + "mlp.gate_proj.weight"), h, kFf);
      const Vec u = matvec(W(p + "mlp.up_proj.weight"), h, kFf);
      Vec a(static_cast<size_t>(kFf));
      for (int64_t i = 0; i < kFf; ++i) a[size_t(i)] = gelu_tanh(g[size_t(i)]) * u[size_t(i)];
      const Vec d = normed(matvec(W(p + "mlp.down_proj.weight"), a, kE),
                           p + "post_feedforward_layernorm.weight");
      for (int64_t i = 0; i < kE; ++i) x[size_t(t)][size_t(i)] += d[size_t(i)];
    }
  }
  Vec logits;
  for (int64_t t = 0; t < T; ++t) {
    const Vec y = matvec(W("lm_head.weight"), normed(x[size_t(t)], "model.norm.weight"), kVocab);
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

std::vector<int32_t> tokens(int64_t n) {
  std::mt19937 rng(9);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint32_t(kVocab));
  return ids;
}

// Gemma 3 4B and larger ship as vision-language checkpoints: config.json wraps the text model's
// config in text_config, and the language model's tensors sit under language_model.model.*
// (transformers 4) or model.language_model.* (transformers 5) beside a vision tower. The
// language model runs, text only, as the text checkpoint does.
TEST(Gemma3Forward, VisionLanguageCheckpointRunsItsLanguageModel) {
  const test::TinyModel m = make_weights();
  const std::vector<int32_t> ids = tokens(12);
  const Vec want = reference(m, ids);
  for (const bool v5 : {false, true}) {
    test::TinyModel wrapped;
    std::mt19937 rng(2);
    for (const auto& [name, values] : m.w) {
      const std::string to = name == "lm_head.weight"
                                 ? (v5 ? name : "language_model.lm_head.weight")
                                 : (v5 ? "model.language_model." : "language_model.model.") +
                                       name.substr(std::string("model.").size());
      wrapped.w[to] = values;
      wrapped.shape[to] = m.shape.at(name);
    }
    wrapped.add(std::string(v5 ? "model." : "") + "vision_tower.vision_model.post_layernorm.weight",
                {16}, rng, 1.0f);
    wrapped.add(
        std::string(v5 ? "model." : "") + "multi_modal_projector.mm_input_projection_weight",
        {16, kE}, rng, 1.0f);
    const std::string dir = test::temp_dir() + "/tiny-gemma3-vl" + (v5 ? "5" : "4");
    std::filesystem::create_directories(dir);
    wrapped.write(dir);
    std::ofstream(dir + "/config.json")
        << R"({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
              "vision_config": {"hidden_size": 16}, "text_config": )"
        << config(false) << "}";
    EXPECT_LE(test::max_row_error(test::logits_of(dir, ids, ids.size()), want, kVocab), 1e-4)
        << (v5 ? "transformers 5 names" : "transformers 4 names");
    // Converted, the GGUF holds the language model alone.
    for (const char* f : {"tokenizer.model", "tokenizer_config.json"})
      std::filesystem::copy_file(test::shared_path(std::string("goldens/gemma2-tiny/") + f),
                                 dir + "/" + f, std::filesystem::copy_options::overwrite_existing);
    const std::string gguf = dir + ".gguf";
    const Status s = convert_hf_to_gguf(dir, gguf, "f32", nullptr, 2);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_LE(test::max_row_error(test::logits_of(gguf, ids, ids.size()), want, kVocab), 1e-4)
        << "converted";
  }
}

TEST(Gemma3Forward, PromptAndDecodeStepsMatchTheFloat64Definition) {
  const test::TinyModel m = make_weights();
  const std::string dir = test::temp_dir() + "/tiny-gemma3";
  std::filesystem::create_directories(dir);
  m.write(dir);
  std::ofstream(dir + "/config.json") << config();  // (over TinyModel's Llama-style one)
  const std::vector<int32_t> ids = tokens(20);
  const Vec want = reference(m, ids);
  // The first 14 as a prompt (every position's logits), the other 6 as decode steps.
  const std::vector<float> got = test::logits_of(dir, ids, 14);
  EXPECT_LE(test::max_row_error(got, want, kVocab), 1e-4);
  // The case can fail: without the window, or without the global layers' linear scaling, the
  // definition gives other logits.
  EXPECT_GT(test::max_row_error(got, reference(m, ids, {.window = true}), kVocab), 1e-2);
  EXPECT_GT(test::max_row_error(got, reference(m, ids, {.linear_scaling = true}), kVocab), 1e-3);
}

}  // namespace
}  // namespace hearth
