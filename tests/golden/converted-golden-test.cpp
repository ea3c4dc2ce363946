// The 2025-26 families through `hearth convert` and `hearth quantize`, against the same HF
// goldens as their safetensors directories (goldens/README.md): bf16 GGUF logits within 1e-4 at
// every position (past the sliding window too) and greedy gen_ids identical; q8_0 (converted,
// and requantized from the bf16 file) within mean KL 0.01 (gemma2-tiny: see its row) and at
// the file's ideal. Each file also carries llama.cpp's names and keys for its architecture
// (gguf-py constants.py), Gemma's norms as 1 + w.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "kernels/ops.h"
#include "runtime/convert/convert.h"
#include "runtime/session.h"
#include "support/golden-data.h"
#include "support/golden-run.h"
#include "support/test-data.h"

namespace hearth {
namespace {

struct Family {
  std::string dir;
  double q8_kld_bound;               // mean KL of the q8_0 files (goldens/README: well under 0.01)
  std::vector<std::string> tensors;  // llama.cpp tensor names the file must hold
  std::vector<std::pair<std::string, double>> keys;  // llama.cpp keys and their values
  std::vector<std::string> absent;                   // names that must not be there (fused forms)
};

std::string name_of(const testing::TestParamInfo<Family>& info) {
  std::string n = info.param.dir;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

const auto kFamilies = testing::Values(
    Family{"qwen3-tiny",
           0.01,
           {"blk.0.attn_q_norm.weight", "blk.1.attn_k_norm.weight", "blk.0.attn_q.weight"},
           {{"qwen3.attention.key_length", 48}, {"qwen3.rope.dimension_count", 48}},
           {}},
    // Gemma 2 q8_0 measures 0.0161, and so does the file's ideal (kIdealSlack below):
    // neither the converter nor the kernels add to it, and llama.cpp's converter writes the same
    // tensor types and Q8_0 bytes (golden-quant-test.cpp). The cause is the fixture's scale: its
    // norm weights are drawn around 1 like every family's (mean 1.0, std 0.29), but Gemma
    // multiplies by 1 + w, so every norm doubles its input: logits' std 2.2 against 1.1-1.2
    // elsewhere, q and k x2 each (scores x4; q8_0 of attn_q or attn_k alone costs 0.0028, 100x
    // qwen3-tiny's). The same model with its norms at the other families' scale measures 0.0003
    // (ConvertedGoldenGemma below). No q8_0 file of this fixture reaches the 0.01; the
    // bound holds the measured figure with ~12% margin.
    Family{"gemma2-tiny",
           0.018,
           {"blk.0.post_attention_norm.weight", "blk.3.post_ffw_norm.weight",
            "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight"},
           {{"gemma2.attn_logit_softcapping", 50},
            {"gemma2.final_logit_softcapping", 30},
            {"gemma2.attention.sliding_window", 8},
            {"gemma2.attention.scale", 1.0 / std::sqrt(24.0)}},
           {"output.weight"}},
    Family{"phi3-tiny",
           0.01,
           {"blk.0.attn_qkv.weight", "blk.1.ffn_up.weight", "output.weight"},
           {{"phi3.rope.dimension_count", 16}},
           {"blk.0.attn_q.weight", "blk.0.ffn_gate.weight"}},
    // Mixtral as llama.cpp writes it: arch "llama" with expert keys, experts stacked.
    Family{"mixtral-tiny",
           0.01,
           {"blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight",
            "blk.1.ffn_down_exps.weight", "output.weight"},
           {{"llama.expert_count", 4},
            {"llama.expert_used_count", 2},
            {"llama.feed_forward_length", 128}},
           {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"}},
    Family{"qwen2-yarn-tiny",
           0.01,
           {"blk.0.attn_q.bias"},
           {{"qwen2.rope.scaling.factor", 4}, {"qwen2.rope.scaling.original_context_length", 32}},
           {}},
    // gpt-oss as llama.cpp's converter writes it: gate_up de-interleaved into gate and up
    // experts, biases beside them, sinks, the FFN norm under post_attention_norm.
    Family{
        "gpt-oss-tiny",
        0.01,
        {"blk.0.attn_sinks.weight", "blk.1.attn_output.bias", "blk.0.attn_q.bias",
         "blk.0.post_attention_norm.weight", "blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_inp.bias",
         "blk.1.ffn_gate_exps.weight", "blk.1.ffn_gate_exps.bias", "blk.0.ffn_up_exps.weight",
         "blk.0.ffn_up_exps.bias", "blk.1.ffn_down_exps.weight", "blk.1.ffn_down_exps.bias"},
        {{"gpt-oss.expert_count", 4},
         {"gpt-oss.expert_used_count", 2},
         {"gpt-oss.expert_feed_forward_length", 64},
         {"gpt-oss.attention.sliding_window", 8},
         {"gpt-oss.rope.scaling.factor", 32},
         {"gpt-oss.rope.scaling.original_context_length", 4096},
         {"gpt-oss.rope.freq_base", 150000}},
        {"blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"}});

// A quantized file's ideal (goldens/README.md): its weights dequantized exactly, f32 math;
// quantize_gguf to f32 writes that file. The CPU Q8_0 kernels take f32 activations, so the
// engine lands on it; the README's "good engine" is within ~10%.
constexpr double kIdealSlack = 1.10;

class ConvertedGolden : public testing::TestWithParam<Family> {
 protected:
  std::string dir() const { return test::shared_path("goldens/" + GetParam().dir); }
  std::string convert(const std::string& type) const {
    const std::string out = test::temp_dir() + "/" + GetParam().dir + "-" + type + ".gguf";
    const Status s = convert_hf_to_gguf(dir(), out, type, nullptr, 2);
    EXPECT_TRUE(s.is_ok()) << s.message();
    return out;
  }
  static std::shared_ptr<Engine> load(const std::string& path) {
    LoadOptions opt;
    opt.n_threads = 2;
    auto e = Engine::load(path, opt);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return e.is_ok() ? e.value() : nullptr;
  }
  Result<std::vector<float>> logits_of(const std::string& path, const test::Golden& g) const {
    auto engine = load(path);
    if (!engine) return Status::error("load failed");
    Session s(engine, 64, test::kF32Cache);  // the goldens' f32 math (golden-run.h)
    HEARTH_TRY(s.init());
    return s.all_logits(g.input_ids);
  }
};

TEST_P(ConvertedGolden, Bf16GgufMatchesLogitsAndGreedyIds) {
  const test::Golden g = test::load_golden(dir());
  const std::string path = convert("bf16");
  auto logits = logits_of(path, g);
  ASSERT_TRUE(logits.is_ok()) << logits.message();
  EXPECT_LE(test::max_row_relative_error(*logits, g.logits, g.n_vocab), 1e-4);
  auto engine = load(path);
  ASSERT_TRUE(engine);
  auto ids = test::greedy_continuation(engine, g);
  ASSERT_TRUE(ids.is_ok()) << ids.message();
  EXPECT_EQ(*ids, g.gen_ids);
}

TEST_P(ConvertedGolden, Q8_0ConvertedAndRequantizedStayWithinKl) {
  const test::Golden g = test::load_golden(dir());
  const std::string direct = convert("q8_0");
  const std::string bf16 = convert("bf16");
  const std::string requantized = bf16.substr(0, bf16.size() - 5) + "-to-q8_0.gguf";
  const Status q = quantize_gguf(bf16, requantized, "q8_0", nullptr, 2);
  ASSERT_TRUE(q.is_ok()) << q.message();
  for (const std::string& path : {direct, requantized}) {
    const std::string ideal_path = path.substr(0, path.size() - 5) + "-ideal-f32.gguf";
    ASSERT_TRUE(quantize_gguf(path, ideal_path, "f32", nullptr, 2).is_ok()) << path;
    auto logits = logits_of(path, g);
    auto ideal = logits_of(ideal_path, g);
    ASSERT_TRUE(logits.is_ok() && ideal.is_ok()) << path;
    const double kld = test::mean_kl_divergence(*logits, g.logits, g.n_vocab);
    const double ideal_kld = test::mean_kl_divergence(*ideal, g.logits, g.n_vocab);
    std::printf("[ kld ] %s mean KL %.6f (ideal %.6f, bound %.3f), top-1 %.2f\n", path.c_str(), kld,
                ideal_kld, GetParam().q8_kld_bound,
                test::top1_agreement(*logits, g.logits, g.n_vocab));
    EXPECT_LE(kld, GetParam().q8_kld_bound) << path;
    EXPECT_LE(kld, ideal_kld * kIdealSlack + 1e-6) << path;
  }
}

TEST_P(ConvertedGolden, FileUsesLlamaCppNamesAndKeys) {
  const Family& fam = GetParam();
  auto f = GgufFile::open(convert("bf16"));
  ASSERT_TRUE(f.is_ok()) << f.message();
  for (const auto& t : fam.tensors) EXPECT_NE(f->find_tensor(t), nullptr) << t;
  for (const auto& t : fam.absent) EXPECT_EQ(f->find_tensor(t), nullptr) << t;
  for (const auto& [key, want] : fam.keys) {
    auto v = f->get_float(key);
    ASSERT_TRUE(v.is_ok() && v->has_value()) << key;
    EXPECT_NEAR(**v, want, 1e-6 * std::max(1.0, std::fabs(want))) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ConvertedGolden, kFamilies, name_of);

// gpt-oss as it ships: experts in MXFP4, the other matrices Q8_0 (llama.cpp's MXFP4_MOE), both
// converted from the HF directory and requantized from the bf16 file. MXFP4 has one power-of-two
// scale per 32 values and 15 levels, so these random-weight experts lose more than Q8_0 does
// (the q8_0 file above: 0.00003). Measured 2026-12-02: mean KL 0.00363, top-1 0.79, both routes;
// the bound leaves ~40% for summation order and kernel changes.
constexpr double kGptOssMxfp4KlBound = 0.005;
TEST(ConvertedGoldenGptOss, Mxfp4ExpertsStayWithinKl) {
  const std::string dir = test::shared_path("goldens/gpt-oss-tiny");
  const test::Golden g = test::load_golden(dir);
  const std::string direct = test::temp_dir() + "/gpt-oss-tiny-mxfp4_moe.gguf";
  ASSERT_TRUE(convert_hf_to_gguf(dir, direct, "mxfp4_moe", nullptr, 2).is_ok());
  const std::string bf16 = test::temp_dir() + "/gpt-oss-tiny-for-mxfp4-bf16.gguf";
  ASSERT_TRUE(convert_hf_to_gguf(dir, bf16, "bf16", nullptr, 2).is_ok());
  const std::string requantized = test::temp_dir() + "/gpt-oss-tiny-bf16-to-mxfp4_moe.gguf";
  const Status q = quantize_gguf(bf16, requantized, "mxfp4_moe", nullptr, 2);
  ASSERT_TRUE(q.is_ok()) << q.message();
  for (const std::string& path : {direct, requantized}) {
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    for (const char* t :
         {"blk.0.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"}) {
      ASSERT_NE(f->find_tensor(t), nullptr) << t;
      EXPECT_EQ(f->find_tensor(t)->dtype, DType::MXFP4) << path << " " << t;
    }
    EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->dtype, DType::Q8_0) << path;
    EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_inp.weight")->dtype, DType::F32) << path;
    EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_exps.bias")->dtype, DType::F32) << path;
    EXPECT_EQ(f->get_int("general.file_type")->value_or(0), 38) << path;
    LoadOptions opt;
    opt.n_threads = 2;
    auto engine = Engine::load(path, opt);
    ASSERT_TRUE(engine.is_ok()) << engine.message();
    Session s(engine.value(), 64);
    ASSERT_TRUE(s.init().is_ok());
    auto logits = s.all_logits(g.input_ids);
    ASSERT_TRUE(logits.is_ok()) << logits.message();
    const double kld = test::mean_kl_divergence(*logits, g.logits, g.n_vocab);
    std::printf("[ kld ] %s mean KL %.6f (bound %.3f), top-1 %.2f\n", path.c_str(), kld,
                kGptOssMxfp4KlBound, test::top1_agreement(*logits, g.logits, g.n_vocab));
    EXPECT_LE(kld, kGptOssMxfp4KlBound) << path;
  }
}

// Gemma 2's quantized path at the other fixtures' scale: gemma2-tiny with every stored norm
// weight lowered by 1, so that 1 + w is the 1.0 +- 0.29 the other families' norms multiply by
// (their q8_0 files: 2.8e-5 to 4.9e-4 above). No transformers golden exists for that model, so
// the reference is the engine's f32 logits of the same file (the f32 path matches transformers
// to 1e-4 on the fixture: Bf16GgufMatchesLogitsAndGreedyIds). Measured 2026-12-02: 0.00027,
// against 0.0161 for the fixture as it is; the bound is the 0.01 tightened to the other
// families' level.
constexpr double kGemmaUsualScaleKlBound = 1e-3;
TEST(ConvertedGoldenGemma, Q8_0AtTheOtherFamiliesNormScaleStaysClose) {
  const std::string dir = test::shared_path("goldens/gemma2-tiny");
  const test::Golden g = test::load_golden(dir);
  const std::string f32 = test::temp_dir() + "/gemma2-for-rescale-f32.gguf";
  ASSERT_TRUE(convert_hf_to_gguf(dir, f32, "f32", nullptr, 2).is_ok());
  auto src = GgufFile::open(f32);
  ASSERT_TRUE(src.is_ok()) << src.message();
  GgufWriter w;
  for (const auto& [key, value] : src->metadata()) w.set_value(key, value);
  int norms = 0;
  for (const TensorView& t : src->tensors()) {
    const bool norm =
        t.name.size() > 12 && t.name.compare(t.name.size() - 12, 12, "_norm.weight") == 0;
    if (!norm) {
      w.add_tensor_ref(t.name, t.dtype, t.shape, t.data, t.nbytes);
      continue;
    }
    ASSERT_EQ(t.dtype, DType::F32) << t.name;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.data, t.nbytes);
    for (float& x : v) x -= 1.0f;
    std::vector<uint8_t> bytes(t.nbytes);
    std::memcpy(bytes.data(), v.data(), t.nbytes);
    w.add_tensor(t.name, DType::F32, t.shape, std::move(bytes));
    ++norms;
  }
  EXPECT_EQ(norms, 4 * 4 + 1);  // four norms in each of four layers, and the final one
  const std::string rescaled = test::temp_dir() + "/gemma2-rescaled-f32.gguf";
  ASSERT_TRUE(w.write(rescaled).is_ok());
  const std::string q8 = test::temp_dir() + "/gemma2-rescaled-q8_0.gguf";
  ASSERT_TRUE(quantize_gguf(rescaled, q8, "q8_0", nullptr, 2).is_ok());
  std::vector<float> logits[2];
  for (int i = 0; i < 2; ++i) {
    LoadOptions opt;
    opt.n_threads = 2;
    auto engine = Engine::load(i == 0 ? rescaled : q8, opt);
    ASSERT_TRUE(engine.is_ok()) << engine.message();
    Session s(engine.value(), 64, test::kF32Cache);
    ASSERT_TRUE(s.init().is_ok());
    auto l = s.all_logits(g.input_ids);
    ASSERT_TRUE(l.is_ok()) << l.message();
    logits[i] = std::move(*l);
  }
  const double kld = test::mean_kl_divergence(logits[1], logits[0], g.n_vocab);
  std::printf("[ kld ] gemma2-tiny, norms at the other families' scale: q8_0 mean KL %.6f\n", kld);
  EXPECT_LE(kld, kGemmaUsualScaleKlBound);
}

// llama.cpp's converter stores Gemma's norm weights with the 1 already added; so does Hearth's.
TEST(ConvertedGoldenGemma, NormWeightsAreStoredAsOnePlusW) {
  const std::string dir = test::shared_path("goldens/gemma2-tiny");
  const std::string out = test::temp_dir() + "/gemma2-norms.gguf";
  ASSERT_TRUE(convert_hf_to_gguf(dir, out, "f32", nullptr, 2).is_ok());
  auto gguf = GgufFile::open(out);
  auto st = SafetensorsCheckpoint::open_dir(dir);
  ASSERT_TRUE(gguf.is_ok() && st.is_ok());
  const std::pair<const char*, const char*> pairs[] = {
      {"blk.1.attn_norm.weight", "model.layers.1.input_layernorm.weight"},
      {"blk.1.post_attention_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
      {"blk.1.ffn_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight"},
      {"blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight"},
      {"output_norm.weight", "model.norm.weight"}};
  for (const auto& [g_name, hf_name] : pairs) {
    const TensorView* g = gguf->find_tensor(g_name);
    const TensorView* h = st->find_tensor(hf_name);
    ASSERT_TRUE(g && h) << g_name;
    ASSERT_EQ(g->numel(), h->numel());
    std::vector<float> gv(static_cast<size_t>(g->numel())), hv(gv.size());
    kernels::dequantize_row(g->dtype, g->data, gv.data(), g->numel());
    kernels::dequantize_row(h->dtype, h->data, hv.data(), h->numel());
    for (size_t i = 0; i < gv.size(); ++i) ASSERT_EQ(gv[i], hv[i] + 1.0f) << g_name << " " << i;
  }
}

}  // namespace
}  // namespace hearth
