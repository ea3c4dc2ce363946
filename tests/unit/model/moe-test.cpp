// The mixture-of-experts FFN: the router's top-k rule (ties, renormalisation), config.json's
// sparse-layer rules, and a tiny random Qwen3-MoE (q/k norm, explicit head_dim, a dense
// mlp_only layer) whose FFN outputs are checked layer by layer against a float64 MoE block
// written here from transformers' definition, with norm_topk_prob on and off.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "formats/gguf.h"
#include "formats/hf-config.h"
#include "model/arch-read.h"
#include "model/moe.h"
#include "runtime/convert/convert.h"
#include "support/test-data.h"
#include "tiny-model.h"

namespace hearth {
namespace {

TEST(MoeRouter, TopKTiesTakeTheLowerIndexAndRenormalise) {
  // Token 0: experts 1 and 3 tie for first, 0 and 2 for second -> 1, 3 (equal weights).
  // Token 1: all equal -> 0, 1.
  const float logits[] = {0.0f, 2.0f, 0.0f, 2.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  int32_t ids[4];
  float w[4];
  route_top_k(logits, 2, 4, 2, true, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 0);
  EXPECT_EQ(ids[3], 1);
  for (float x : w) EXPECT_FLOAT_EQ(x, 0.5f);
  // Without renormalisation the weights are the softmax probabilities themselves.
  route_top_k(logits, 2, 4, 2, false, ids, w);
  const double z = 2 * std::exp(2.0) + 2;
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-7);
  EXPECT_FLOAT_EQ(w[2], 0.25f);
}

TEST(MoeRouter, DescendingOrderAndRenormalisedSum) {
  const float logits[] = {0.5f, -1.0f, 3.0f, 2.0f, 0.0f};
  int32_t ids[3];
  float w[3];
  route_top_k(logits, 1, 5, 3, true, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 0);
  const double a = std::exp(3.0), b = std::exp(2.0), c = std::exp(0.5);
  EXPECT_NEAR(w[0], a / (a + b + c), 1e-6);
  EXPECT_NEAR(w[1], b / (a + b + c), 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
  route_top_k(logits, 1, 5, 1, false, ids, w);  // top-1 without renormalising: p, not 1
  EXPECT_EQ(ids[0], 2);
  EXPECT_LT(w[0], 0.9f);
}

TEST(MoeSpec, Qwen3MoeSparseStepAndDenseLayers) {
  auto c = parse_hf_config(R"({"model_type": "qwen3_moe", "vocab_size": 64, "hidden_size": 32,
      "intermediate_size": 96, "moe_intermediate_size": 16, "num_hidden_layers": 6,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "num_experts": 8,
      "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [3]})",
                           "config.json");
  ASSERT_TRUE(c.is_ok()) << c.message();
  auto s = read_hf_spec(*c);
  ASSERT_TRUE(s.is_ok()) << s.message();
  const HParams& hp = s->hp;
  EXPECT_EQ(hp.n_expert, 8);
  EXPECT_EQ(hp.n_expert_used, 2);
  EXPECT_EQ(hp.n_ff, 96);
  EXPECT_EQ(hp.n_ff_exp, 16);
  EXPECT_FALSE(hp.moe_norm_topk);  // transformers' default for Qwen3-MoE
  EXPECT_TRUE(hp.qk_norm);
  const bool sparse[] = {false, true, false, false, false, true};  // (l+1) % 2 == 0, not 3
  for (int64_t l = 0; l < 6; ++l) EXPECT_EQ(hp.is_moe_layer(l), sparse[l]) << l;
}

// A tiny Qwen3-MoE: 3 layers, layer 1 dense (mlp_only_layers), 4 experts top-2.
struct TinyMoe {
  test::TinyModel m;
  int64_t n_expert = 4, top_k = 2, ff_exp = 16;
  std::string write(bool norm_topk) {
    m.model_type = "qwen3_moe";
    m.layers = 3;
    m.head_dim = 12;  // explicit: 4 heads x 12 != hidden 32
    m.make(11);
    std::mt19937 rng(5);
    for (int64_t l = 0; l < m.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      m.add(p + "self_attn.q_norm.weight", {m.head_dim}, rng, 0.1f, 1.0f);
      m.add(p + "self_attn.k_norm.weight", {m.head_dim}, rng, 0.1f, 1.0f);
      if (l == 1) continue;
      for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
        m.w.erase(p + "mlp." + n + ".weight");
        m.shape.erase(p + "mlp." + n + ".weight");
      }
      m.add(p + "mlp.gate.weight", {n_expert, m.hidden}, rng, 1.0f);
      for (int64_t e = 0; e < n_expert; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        m.add(x + "gate_proj.weight", {ff_exp, m.hidden}, rng, 0.4f);
        m.add(x + "up_proj.weight", {ff_exp, m.hidden}, rng, 0.4f);
        m.add(x + "down_proj.weight", {m.hidden, ff_exp}, rng, 0.4f);
      }
    }
    static int n = 0;
    const std::string dir = test::temp_dir() + "/qwen3moe-" + std::to_string(n++);
    std::filesystem::create_directories(dir);
    m.write(dir,
            ", \"head_dim\": 12, \"num_experts\": 4, \"num_experts_per_tok\": 2, "
            "\"moe_intermediate_size\": 16, \"decoder_sparse_step\": 1, "
            "\"mlp_only_layers\": [1], \"norm_topk_prob\": " +
                std::string(norm_topk ? "true" : "false"));
    return dir;
  }
};

using Vec = std::vector<double>;

Vec matvec(const std::vector<float>& m, const Vec& x, int64_t rows) {
  Vec y(static_cast<size_t>(rows), 0.0);
  const size_t cols = x.size();
  for (size_t r = 0; r < size_t(rows); ++r)
    for (size_t c = 0; c < cols; ++c) y[r] += double(m[r * cols + c]) * x[c];
  return y;
}

Vec gated(const test::TinyModel& m, const std::string& p, const Vec& xn, int64_t ff) {
  const Vec g = matvec(m.w.at(p + "gate_proj.weight"), xn, ff);
  const Vec u = matvec(m.w.at(p + "up_proj.weight"), xn, ff);
  Vec a(static_cast<size_t>(ff));
  for (size_t i = 0; i < a.size(); ++i) a[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return matvec(m.w.at(p + "down_proj.weight"), a, m.hidden);
}

// transformers' Qwen3MoeSparseMoeBlock in float64: softmax, top-k, optional renormalisation.
Vec moe_reference(const TinyMoe& t, int64_t l, const Vec& xn, bool norm_topk) {
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
  Vec z = matvec(t.m.w.at(p + "gate.weight"), xn, t.n_expert);
  double mx = -1e300, sum = 0;
  for (double v : z) mx = std::max(mx, v);
  for (double& v : z) sum += (v = std::exp(v - mx));
  for (double& v : z) v /= sum;
  std::vector<int64_t> order(static_cast<size_t>(t.n_expert));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return z[size_t(a)] > z[size_t(b)]; });
  double picked = 0;
  for (int64_t k = 0; k < t.top_k; ++k) picked += z[size_t(order[size_t(k)])];
  Vec out(static_cast<size_t>(t.m.hidden), 0.0);
  for (int64_t k = 0; k < t.top_k; ++k) {
    const int64_t e = order[size_t(k)];
    const double w = z[size_t(e)] / (norm_topk ? picked : 1.0);
    const Vec y = gated(t.m, p + "experts." + std::to_string(e) + ".", xn, t.ff_exp);
    for (size_t i = 0; i < out.size(); ++i) out[i] += w * y[i];
  }
  return out;
}

// Runs the model over `ids` with debug taps, and checks each layer's output against the
// float64 FFN block applied to the engine's own attention output (so only the FFN is judged).
void check_layers(bool norm_topk, std::vector<float>* logits_out) {
  TinyMoe t;
  const std::string dir = t.write(norm_topk);
  LoadOptions opt;
  opt.n_threads = 2;
  auto loaded = load_model(dir, opt);
  ASSERT_TRUE(loaded.is_ok()) << loaded.message();
  Model& model = **loaded;
  EXPECT_EQ(model.hparams().n_expert, 4);
  EXPECT_TRUE(model.hparams().is_moe_layer(0));
  EXPECT_FALSE(model.hparams().is_moe_layer(1));
  std::map<std::string, std::vector<float>> taps;
  model.debug_tap = [&](const std::string& name, const float* d, int64_t n) {
    taps[name].assign(d, d + n);
  };
  const std::vector<int32_t> ids = {3, 17, 42, 5, 9, 61, 2, 30};
  const int64_t T = int64_t(ids.size()), E = t.m.hidden, QD = t.m.heads * t.m.head_dim;
  auto kv = model.new_kv_cache(64);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  ForwardScratch scratch;
  std::vector<float> logits;
  ASSERT_TRUE(model.prefill(*kv, ids, scratch, &logits, true).is_ok());
  *logits_out = logits;

  std::vector<float> x = taps.at("token_embd");
  for (int64_t l = 0; l < t.m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::vector<float>& attn = taps.at("blk." + std::to_string(l) + ".attn_out");
    const std::vector<float>& out = taps.at("blk." + std::to_string(l) + ".out");
    double worst = 0;
    for (int64_t r = 0; r < T; ++r) {
      Vec a(attn.begin() + r * QD, attn.begin() + (r + 1) * QD);
      Vec h = matvec(t.m.w.at(p + "self_attn.o_proj.weight"), a, E);
      for (int64_t i = 0; i < E; ++i) h[size_t(i)] += x[size_t(r * E + i)];
      double ss = 0;
      for (double v : h) ss += v * v;
      const double s = 1 / std::sqrt(ss / double(E) + t.m.eps);
      const std::vector<float>& g = t.m.w.at(p + "post_attention_layernorm.weight");
      Vec xn(static_cast<size_t>(E));
      for (size_t i = 0; i < xn.size(); ++i) xn[i] = h[i] * s * g[i];
      const Vec f =
          l == 1 ? gated(t.m, p + "mlp.", xn, t.m.ff) : moe_reference(t, l, xn, norm_topk);
      double num = 0, den = 0;
      for (int64_t i = 0; i < E; ++i) {
        const double want = h[size_t(i)] + f[size_t(i)];
        const double d = double(out[size_t(r * E + i)]) - want;
        num += d * d;
        den += want * want;
      }
      worst = std::max(worst, std::sqrt(num / den));
    }
    EXPECT_LT(worst, 1e-5) << "layer " << l << (norm_topk ? " (norm_topk)" : "");
    x = out;
  }

  // Decode one token at a time: the same logits as the batched prefill (rows grouped per
  // expert differently).
  model.debug_tap = nullptr;
  auto kv2 = model.new_kv_cache(64);
  ASSERT_TRUE(kv2.is_ok());
  for (int64_t r = 0; r < T; ++r) {
    std::vector<float> one;
    ASSERT_TRUE(model.decode(*kv2, ids[size_t(r)], scratch, &one).is_ok());
    for (int64_t i = 0; i < t.m.vocab; ++i)
      EXPECT_NEAR(one[size_t(i)], logits[size_t(r * t.m.vocab + i)], 1e-4) << r << " " << i;
  }
}

TEST(MoeForward, Qwen3MoeMatchesFloat64FfnWithAndWithoutRenormalising) {
  std::vector<float> with_norm, without;
  check_layers(true, &with_norm);
  check_layers(false, &without);
  // The flag matters: the two models (same weights) give different logits.
  ASSERT_EQ(with_norm.size(), without.size());
  double diff = 0;
  for (size_t i = 0; i < with_norm.size(); ++i)
    diff = std::max(diff, double(std::abs(with_norm[i] - without[i])));
  EXPECT_GT(diff, 1e-3);
}

// The same tiny Qwen3-MoE as a GGUF in llama.cpp's form (qwen3moe.* keys, experts stacked into
// blk.N.ffn_{gate,up,down}_exps [n_expert, rows, cols]); `edit` may spoil it.
std::string write_gguf(
    const TinyMoe& t, const std::string& name,
    const std::function<void(GgufWriter&, std::map<std::string, std::vector<float>>&)>& edit =
        nullptr) {
  const test::TinyModel& m = t.m;
  GgufWriter w;
  const std::string a = "qwen3moe.";
  w.set_string("general.architecture", "qwen3moe");
  w.set_u32(a + "embedding_length", uint32_t(m.hidden));
  w.set_u32(a + "block_count", uint32_t(m.layers));
  w.set_u32(a + "feed_forward_length", uint32_t(m.ff));
  w.set_u32(a + "attention.head_count", uint32_t(m.heads));
  w.set_u32(a + "attention.head_count_kv", uint32_t(m.kv_heads));
  w.set_u32(a + "attention.key_length", uint32_t(m.head_dim));
  w.set_u32(a + "attention.value_length", uint32_t(m.head_dim));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", float(m.eps));
  w.set_f32(a + "rope.freq_base", float(m.theta));
  w.set_u32(a + "expert_count", uint32_t(t.n_expert));
  w.set_u32(a + "expert_used_count", uint32_t(t.top_k));
  w.set_u32(a + "expert_feed_forward_length", uint32_t(t.ff_exp));
  w.set_bool(a + "expert_weights_norm", true);
  std::map<std::string, std::vector<float>> out;  // GGUF name -> values
  std::map<std::string, std::vector<int64_t>> shapes;
  auto put = [&](const std::string& gguf, const std::string& hf) {
    out[gguf] = m.w.at(hf);
    shapes[gguf] = m.shape.at(hf);
  };
  put("token_embd.weight", "model.embed_tokens.weight");
  put("output_norm.weight", "model.norm.weight");
  put("output.weight", "lm_head.weight");
  const std::pair<const char*, const char*> per_layer[] = {
      {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},       {"ffn_gate_inp", "mlp.gate"}};
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".",
                      h = "model.layers." + std::to_string(l) + ".";
    for (const auto& [gn, hn] : per_layer)
      if (m.w.count(h + hn + ".weight")) put(g + gn + ".weight", h + hn + ".weight");
    if (l == 1) continue;
    const std::pair<const char*, const char*> exps[] = {
        {"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}};
    for (const auto& [gn, hn] : exps) {
      std::vector<float>& v = out[g + gn + ".weight"];
      for (int64_t e = 0; e < t.n_expert; ++e) {
        const auto& x = m.w.at(h + "mlp.experts." + std::to_string(e) + "." + hn + ".weight");
        v.insert(v.end(), x.begin(), x.end());
      }
      const auto& s0 = m.shape.at(h + "mlp.experts.0." + hn + ".weight");
      shapes[g + gn + ".weight"] = {t.n_expert, s0[0], s0[1]};
    }
  }
  if (edit) edit(w, out);
  for (const auto& [n, v] : out) {
    std::vector<int64_t> shape = shapes[n];
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    if (count != int64_t(v.size())) shape[0] = int64_t(v.size()) / (count / shape[0]);  // edited
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.add_tensor(n, DType::F32, shape, std::move(bytes));
  }
  const std::string path = test::temp_dir() + "/" + name + ".gguf";
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

std::vector<float> prefill_logits(const std::string& path, const std::vector<int32_t>& ids) {
  LoadOptions opt;
  opt.n_threads = 2;
  auto model = load_model(path, opt);
  EXPECT_TRUE(model.is_ok()) << model.message();
  if (!model.is_ok()) return {};
  auto kv = (*model)->new_kv_cache(64);
  ForwardScratch scratch;
  std::vector<float> logits;
  EXPECT_TRUE((*model)->prefill(*kv, ids, scratch, &logits, true).is_ok());
  return logits;
}

TEST(MoeGguf, StackedExpertsGiveTheSameLogitsAsTheHfDirectory) {
  TinyMoe t;
  const std::string dir = t.write(true);
  const std::string gguf = write_gguf(t, "stacked");
  const std::vector<int32_t> ids = {3, 17, 42, 5, 9, 61};
  const std::vector<float> a = prefill_logits(dir, ids), b = prefill_logits(gguf, ids);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << i;
}

// Placement's accounting: a sparse layer placed with its experts costs its router and every
// expert (--gpu-layers auto), without them its attention alone (--cpu-moe); the bytes a decoded
// token streams count only n_expert_used of n_expert experts.
TEST(MoeWeights, LayerBytesCountEveryExpertAndTokenBytesTheActiveShare) {
  TinyMoe t;
  const std::string dir = t.write(true);
  LoadOptions opt;
  opt.n_threads = 1;
  opt.cpu_moe = kCpuMoeAll;  // no GPU: the experts stay with their (CPU) layer
  auto model = load_model(dir, opt);
  ASSERT_TRUE(model.is_ok()) << model.message();
  const Model& m = **model;
  const auto nbytes = [](const TensorView& v) { return v.nbytes; };
  uint64_t with = 0, without = 0;
  for (int64_t l = 0; l < m.hparams().n_layer; ++l) {
    const uint64_t a = m.layer_weight_bytes(l, true, nbytes),
                   b = m.layer_weight_bytes(l, false, nbytes);
    if (m.hparams().is_moe_layer(l))
      EXPECT_GT(a, b) << l;
    else
      EXPECT_EQ(a, b) << l;  // the dense layer
    EXPECT_EQ(m.expert_backend(l), m.layer_backends()[size_t(l)]) << l;
    with += a, without += b;
  }
  const uint64_t out_max = uint64_t(m.hparams().n_vocab * m.hparams().n_embd) * 4;
  EXPECT_GT(m.weight_bytes(), without);
  EXPECT_LT(m.weight_bytes() - without, with - without + out_max);
  EXPECT_LT(m.weight_bytes(), with);  // 2 of 4 experts per token, the head far smaller
}

std::string gguf_error(const std::string& path) {
  LoadOptions opt;
  opt.n_threads = 1;
  auto model = load_model(path, opt);
  return model.is_ok() ? "" : model.message();
}

TEST(MoeGguf, CountsAndStackedShapesThatDisagreeAreOneLineErrors) {
  TinyMoe t;
  t.write(true);
  const std::string used = write_gguf(
      t, "used", [](GgufWriter& w, auto&) { w.set_u32("qwen3moe.expert_used_count", 5); });
  std::string err = gguf_error(used);
  EXPECT_NE(err.find("used.gguf"), std::string::npos) << err;
  EXPECT_NE(err.find("qwen3moe.expert_used_count 5 exceeds qwen3moe.expert_count 4"),
            std::string::npos)
      << err;
  const std::string short_stack = write_gguf(t, "short", [&](GgufWriter&, auto& out) {
    auto& v = out["blk.2.ffn_up_exps.weight"];
    v.resize(v.size() / 4 * 3);  // three experts of four
  });
  err = gguf_error(short_stack);
  EXPECT_NE(err.find("short.gguf"), std::string::npos) << err;
  EXPECT_NE(err.find("blk.2.ffn_up_exps.weight has shape [3, 16, 32], expected [4, 16, 32]"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST(MoeConvert, Qwen3MoeDirectoryToGgufKeepsItsLogits) {
  // hearth convert writes the stacked experts, qwen3moe's keys (the experts' width, the
  // renormalisation flag when it differs from llama.cpp's default), the dense layer's own FFN.
  TinyMoe t;
  t.m.vocab = 32000;  // the shared SentencePiece tokenizer's size
  const std::string dir = t.write(false);
  std::filesystem::copy_file(test::shared_path("goldens/mixtral-tiny/tokenizer.model"),
                             dir + "/tokenizer.model");
  const std::string out = test::temp_dir() + "/qwen3moe-f32.gguf";
  const Status s = convert_hf_to_gguf(dir, out, "f32", nullptr, 2);
  ASSERT_TRUE(s.is_ok()) << s.message();
  auto f = GgufFile::open(out);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f->get_int("qwen3moe.expert_count")->value_or(0), 4);
  EXPECT_EQ(f->get_int("qwen3moe.expert_used_count")->value_or(0), 2);
  EXPECT_EQ(f->get_int("qwen3moe.expert_feed_forward_length")->value_or(0), 16);
  EXPECT_EQ(f->get_bool("qwen3moe.expert_weights_norm")->value_or(true), false);
  const TensorView* exps = f->find_tensor("blk.2.ffn_down_exps.weight");
  ASSERT_NE(exps, nullptr);
  EXPECT_EQ(exps->shape, (std::vector<int64_t>{4, 32, 16}));
  EXPECT_NE(f->find_tensor("blk.1.ffn_gate.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_inp.weight"), nullptr);
  const std::vector<int32_t> ids = {3, 17, 4200, 5, 31999};
  const std::vector<float> a = prefill_logits(dir, ids), b = prefill_logits(out, ids);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
}  // namespace hearth
