// What a checkpoint asks for that the engine cannot honour is a load error of one line naming
// the file and the field or tensor: unknown activations and RoPE types, inconsistent layer
// lists, windows, soft-caps, rotary dims, head_dim and fused shapes.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/model.h"
#include "support/test-data.h"
#include "tiny-model.h"

namespace hearth {
namespace {

// Loads the tiny model with `extra` config fields; returns the error ("" when it loaded).
std::string load_error(test::TinyModel m, const std::string& extra) {
  static int n = 0;
  const std::string dir = test::temp_dir() + "/bad-" + std::to_string(n++);
  std::filesystem::create_directories(dir);
  if (m.w.empty()) m.make();
  m.write(dir, extra);
  LoadOptions opt;
  opt.n_threads = 1;
  auto model = load_model(dir, opt);
  return model.is_ok() ? "" : model.message();
}

void expect_error(const std::string& err, const std::string& field) {
  EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  EXPECT_NE(err.find(field), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST(ArchBadInput, TheCleanTinyModelLoads) {
  EXPECT_EQ(load_error({}, ""), "");
}

// Per-layer and RoPE tables are sized by these: a trillion layers, or heads a trillion wide, must
// be refused before that.
TEST(ArchBadInput, LayerCountOrHeadWidthPastAnyModel) {
  expect_error(load_error({}, ", \"num_hidden_layers\": 1000000000000"),
               "num_hidden_layers: 1000000000000 is more than 4096 layers");
  expect_error(load_error({}, ", \"head_dim\": 1000000000000"),
               "head_dim: 1000000000000 is not in 1..1024");
}

TEST(ArchBadInput, UnknownActivation) {
  expect_error(load_error({}, ", \"hidden_activation\": \"relu\""),
               "hidden_activation: activation 'relu' is not supported");
}

// A field's text is quoted escaped: the error stays one line whatever the file holds.
TEST(ArchBadInput, QuotedFieldsStayOneLine) {
  expect_error(load_error({}, ", \"rope_scaling\": {\"rope_type\": \"x\\ny\", \"factor\": 2.0}"),
               "rope type 'x\\ny'");
  expect_error(load_error({}, ", \"hidden_act\": \"\\n\""), "activation '\\n'");
}

TEST(ArchBadInput, UnknownRopeType) {
  expect_error(load_error({}, ", \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}"),
               "rope type 'dynamic' is not supported");
}

TEST(ArchBadInput, LayerTypesOfTheWrongLengthOrKind) {
  expect_error(load_error({}, ", \"layer_types\": [\"full_attention\"]"), "layer_types");
  expect_error(load_error({}, ", \"layer_types\": [\"full_attention\", \"chunked_attention\"]"),
               "layer_types[1]: 'chunked_attention' is not supported");
}

TEST(ArchBadInput, SlidingLayersWithoutAWindow) {
  expect_error(load_error({}, ", \"layer_types\": [\"sliding_attention\", \"full_attention\"]"),
               "sliding_window");
}

TEST(ArchBadInput, NonPositiveSoftcapsAndScales) {
  expect_error(load_error({}, ", \"attn_logit_softcapping\": 0.0"), "attn_logit_softcapping");
  expect_error(load_error({}, ", \"final_logit_softcapping\": -30.0"), "final_logit_softcapping");
  expect_error(load_error({}, ", \"query_pre_attn_scalar\": 0"), "query_pre_attn_scalar");
}

TEST(ArchBadInput, RotaryDimsThatAreNotEven) {
  // head_dim 8 x 0.2 = 1 rotary dim.
  expect_error(load_error({}, ", \"partial_rotary_factor\": 0.2"), "partial_rotary_factor");
}

TEST(ArchBadInput, HeadDimThatDoesNotMatchTheTensors) {
  const std::string err = load_error({}, ", \"head_dim\": 12");
  EXPECT_NE(err.find("self_attn.q_proj.weight has shape [32, 32], expected [48, 32]"),
            std::string::npos)
      << err;
}

TEST(ArchBadInput, FusedProjectionOfTheWrongRows) {
  test::TinyModel m;
  m.model_type = "phi3";
  m.make();
  std::mt19937 rng(1);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"q_proj", "k_proj", "v_proj"}) {
      m.w.erase(p + "self_attn." + n + ".weight");
      m.shape.erase(p + "self_attn." + n + ".weight");
    }
    m.add(p + "self_attn.qkv_proj.weight", {32 + 2 * 16 - 1, 32}, rng, 0.3f);  // one row short
  }
  const std::string err = load_error(m, "");
  EXPECT_NE(err.find("self_attn.qkv_proj.weight has shape [63, 32], expected [64, 32]"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find('\n'), std::string::npos);
}

// A tiny Mixtral: the dense FFN replaced by `experts` experts (block_sparse_moe.*).
test::TinyModel tiny_mixtral(int64_t experts) {
  test::TinyModel m;
  m.model_type = "mixtral";
  m.make();
  std::mt19937 rng(3);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
      m.w.erase(p + "mlp." + n + ".weight");
      m.shape.erase(p + "mlp." + n + ".weight");
    }
    m.add(p + "block_sparse_moe.gate.weight", {experts, m.hidden}, rng, 0.3f);
    for (int64_t e = 0; e < experts; ++e) {
      const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      m.add(x + "w1.weight", {m.ff, m.hidden}, rng, 0.3f);
      m.add(x + "w3.weight", {m.ff, m.hidden}, rng, 0.3f);
      m.add(x + "w2.weight", {m.hidden, m.ff}, rng, 0.3f);
    }
  }
  return m;
}

TEST(ArchBadInput, ExpertCountsThatDisagree) {
  EXPECT_EQ(load_error(tiny_mixtral(4), ", \"num_local_experts\": 4, \"num_experts_per_tok\": 2"),
            "");
  expect_error(
      load_error(tiny_mixtral(4), ", \"num_local_experts\": 4, \"num_experts_per_tok\": 5"),
      "num_experts_per_tok: must be in [1, num_local_experts 4], got 5");
  expect_error(load_error(tiny_mixtral(4), ", \"num_experts_per_tok\": 2"), "num_local_experts");
  // The file's tensors say 4 experts; the config 3 (a router shape error) or 5 (one missing).
  std::string err =
      load_error(tiny_mixtral(4), ", \"num_local_experts\": 3, \"num_experts_per_tok\": 2");
  EXPECT_NE(err.find("block_sparse_moe.gate.weight has shape [4, 32], expected [3, 32]"),
            std::string::npos)
      << err;
  test::TinyModel five = tiny_mixtral(4);
  std::mt19937 rng(4);
  for (int64_t l = 0; l < five.layers; ++l)  // a router for 5, experts for 4
    five.add("model.layers." + std::to_string(l) + ".block_sparse_moe.gate.weight", {5, 32}, rng,
             0.3f);
  err = load_error(five, ", \"num_local_experts\": 5, \"num_experts_per_tok\": 2");
  EXPECT_NE(err.find("missing tensor model.layers.0.block_sparse_moe.experts.4.w1.weight"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find('\n'), std::string::npos);
}

TEST(ArchBadInput, Qwen3MoeLayerListsOutOfRange) {
  test::TinyModel m;
  m.model_type = "qwen3_moe";
  expect_error(load_error(m,
                          ", \"num_experts\": 4, \"num_experts_per_tok\": 2, "
                          "\"mlp_only_layers\": [0, 7]"),
               "mlp_only_layers: layer 7 is out of range");
  expect_error(load_error(m,
                          ", \"num_experts\": 4, \"num_experts_per_tok\": 2, "
                          "\"decoder_sparse_step\": 0"),
               "decoder_sparse_step");
}

TEST(ArchBadInput, UnknownModelType) {
  test::TinyModel m;
  m.model_type = "mamba";
  expect_error(load_error(m, ""), "model_type: unknown architecture 'mamba'");
}

}  // namespace
}  // namespace hearth
