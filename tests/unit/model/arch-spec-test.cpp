// config.json -> the flat description the forward pass walks, for families with no golden here
// (Gemma 3, Phi-4-mini's partial rotary + LongRoPE) and the per-family sliding rules: which
// layers slide, which RoPE table each uses, the scales and factors, all from the definitions in
// transformers' configs and rope utils.
#include <gtest/gtest.h>

#include <cmath>

#include "formats/hf-config.h"
#include "model/arch-read.h"

namespace hearth {
namespace {

ModelSpec spec_of(const std::string& json) {
  auto c = parse_hf_config(json, "config.json");
  EXPECT_TRUE(c.is_ok()) << c.message();
  auto s = read_hf_spec(*c);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_TRUE(check_model_spec(*s).is_ok());
  return std::move(s).value();
}

const char* kSizes = R"("vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 12, "num_attention_heads": 4, "num_key_value_heads": 2)";

TEST(ArchSpec, Gemma3LocalAndGlobalLayers) {
  // An older Gemma 3 config: sliding_window_pattern instead of layer_types, the local base as
  // rope_local_base_freq, linear scaling (factor 8) on the global layers only.
  const ModelSpec s = spec_of(std::string("{\"model_type\": \"gemma3_text\", ") + kSizes +
                              R"(, "head_dim": 32, "sliding_window": 512,
      "sliding_window_pattern": 6, "query_pre_attn_scalar": 256, "rope_theta": 1000000.0,
      "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
      "hidden_activation": "gelu_pytorch_tanh"})");
  const HParams& hp = s.hp;
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_EQ(hp.norms, NormPlacement::kSandwich);
  EXPECT_EQ(hp.activation, FfnActivation::kGeluTanh);
  EXPECT_FLOAT_EQ(hp.query_scale, 1.0f / 16.0f);
  EXPECT_FLOAT_EQ(hp.embed_scale, 8.0f);
  ASSERT_EQ(s.rope.size(), 2u);
  for (int64_t l = 0; l < 12; ++l) {
    const bool global = (l + 1) % 6 == 0;
    EXPECT_EQ(hp.layers[size_t(l)].window, global ? 0 : 512) << l;
    EXPECT_EQ(hp.layers[size_t(l)].rope, global ? 0 : 1) << l;
  }
  // Pair 1 of 16: global = 1e6^(-2/32) / 8, local = 1e4^(-2/32).
  EXPECT_NEAR(s.rope[0].inv_freq[1], std::pow(1e6, -2.0 / 32) / 8, 1e-7);
  EXPECT_NEAR(s.rope[1].inv_freq[1], std::pow(1e4, -2.0 / 32), 1e-7);
}

TEST(ArchSpec, Phi4MiniPartialRotaryWithLongRope) {
  std::string shorts, longs;
  for (int i = 0; i < 12; ++i) {  // n_rot = 32 * 0.75 = 24: 12 factors
    shorts += (i ? "," : "") + std::to_string(1.0 + 0.1 * i);
    longs += (i ? "," : "") + std::to_string(2.0 + 0.5 * i);
  }
  const ModelSpec s = spec_of(std::string("{\"model_type\": \"phi3\", ") + kSizes +
                              R"(, "max_position_embeddings": 131072,
      "original_max_position_embeddings": 4096, "partial_rotary_factor": 0.75, "head_dim": 32,
      "rope_theta": 10000.0, "rope_scaling": {"type": "longrope", "short_factor": [)" +
                              shorts + "], \"long_factor\": [" + longs + "]}}");
  EXPECT_EQ(s.hp.n_rot, 24);
  EXPECT_EQ(s.hp.head_dim, 16 * 2);
  const RopeTable& t = s.rope[0];
  EXPECT_EQ(t.long_beyond, 4096);
  ASSERT_EQ(t.inv_freq.size(), 12u);
  EXPECT_NEAR(t.inv_freq[3], 1.0 / (1.3 * std::pow(1e4, 6.0 / 24)), 1e-7);
  EXPECT_NEAR(t.inv_freq_long[3], 1.0 / (3.5 * std::pow(1e4, 6.0 / 24)), 1e-7);
  // transformers: sqrt(1 + ln(131072 / 4096) / ln(4096)).
  EXPECT_NEAR(t.mscale, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-6);
}

TEST(ArchSpec, YarnFactorRampAndAttentionFactor) {
  const ModelSpec s = spec_of(std::string("{\"model_type\": \"qwen2\", ") + kSizes +
                              R"(, "max_position_embeddings": 131072, "rope_theta": 1000000.0,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                       "original_max_position_embeddings": 32768}})");
  const RopeTable& t = s.rope[0];
  EXPECT_NEAR(t.mscale, 0.1 * std::log(4.0) + 1.0, 1e-6);
  // The fastest pairs keep their frequency, the slowest are divided by the factor.
  EXPECT_NEAR(t.inv_freq[0], 1.0, 1e-7);
  EXPECT_NEAR(t.inv_freq[7], std::pow(1e6, -14.0 / 16) / 4, 1e-9);
}

TEST(ArchSpec, WhichLayersSlidePerFamily) {
  // Mistral: every layer. Qwen2: only with use_sliding_window, from max_window_layers on.
  // Llama: transformers ignores sliding_window, and so does Hearth.
  const ModelSpec mistral = spec_of(std::string("{\"model_type\": \"mistral\", ") + kSizes +
                                    ", \"sliding_window\": 4096}");
  for (const auto& l : mistral.hp.layers) EXPECT_EQ(l.window, 4096);
  const ModelSpec qwen_off = spec_of(std::string("{\"model_type\": \"qwen2\", ") + kSizes +
                                     ", \"sliding_window\": 4096, \"use_sliding_window\": false}");
  EXPECT_FALSE(qwen_off.hp.any_sliding());
  const ModelSpec qwen_on =
      spec_of(std::string("{\"model_type\": \"qwen2\", ") + kSizes +
              ", \"sliding_window\": 64, \"use_sliding_window\": true, \"max_window_layers\": 8}");
  for (int64_t l = 0; l < 12; ++l) EXPECT_EQ(qwen_on.hp.layers[size_t(l)].window, l >= 8 ? 64 : 0);
  const ModelSpec llama =
      spec_of(std::string("{\"model_type\": \"llama\", ") + kSizes + ", \"sliding_window\": 4096}");
  EXPECT_FALSE(llama.hp.any_sliding());
}

}  // namespace
}  // namespace hearth
