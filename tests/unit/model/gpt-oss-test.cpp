// gpt-oss files that disagree with themselves: `hearth convert` of the golden gpt-oss-tiny,
// copied with one tensor or key spoiled, must fail to load with one line naming the tensor or
// key (sinks shape, expert count in the keys, in the router, in the expert biases); a clean
// copy loads. And placement: a GPU backend without attention sinks takes no gpt-oss layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>

#include "backend/backend.h"
#include "backend/placement.h"
#include "formats/gguf.h"
#include "formats/hf-config.h"
#include "model/arch-read.h"
#include "model/model.h"
#include "runtime/convert/convert.h"
#include "support/test-data.h"

namespace hearth {
namespace {

// The golden converted once per process (bf16).
const std::string& converted() {
  static const std::string path = [] {
    const std::string out = test::temp_dir() + "/gpt-oss-tiny-bf16.gguf";
    const Status s =
        convert_hf_to_gguf(test::shared_path("goldens/gpt-oss-tiny"), out, "bf16", nullptr, 1);
    EXPECT_TRUE(s.is_ok()) << s.message();
    return out;
  }();
  return path;
}

// A copy of the converted file with `edit` applied to a writer holding its keys and tensors
// (tensors are added after the edit, so the edit's own version of a tensor wins); the load
// error, or "" when it loads.
using Edit = std::function<void(GgufWriter&, std::vector<std::string>& skip)>;
std::string load_error_after(const Edit& edit) {
  static int n = 0;
  auto src = GgufFile::open(converted());
  EXPECT_TRUE(src.is_ok()) << src.message();
  if (!src.is_ok()) return "no source";
  GgufWriter w;
  for (const auto& [key, value] : src->metadata()) w.set_value(key, value);
  std::vector<std::string> skip;
  edit(w, skip);
  for (const TensorView& t : src->tensors()) {
    if (std::find(skip.begin(), skip.end(), t.name) != skip.end()) continue;
    w.add_tensor_ref(t.name, t.dtype, t.shape, t.data, t.nbytes);
  }
  const std::string out = test::temp_dir() + "/spoiled-" + std::to_string(n++) + ".gguf";
  const Status ws = w.write(out);
  EXPECT_TRUE(ws.is_ok()) << ws.message();
  LoadOptions opt;
  opt.n_threads = 1;
  opt.use_weight_cache = false;
  auto model = load_model(out, opt);
  return model.is_ok() ? "" : model.message();
}

void expect_one_line_naming(const std::string& err, const std::string& what) {
  EXPECT_NE(err.find(what), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

// A float32 tensor of `shape` filled with small values, replacing the file's own.
void replace_f32(GgufWriter& w, std::vector<std::string>& skip, const std::string& name,
                 const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n), 0.25f);
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  w.add_tensor(name, DType::F32, shape, std::move(bytes));
  skip.push_back(name);
}

TEST(GptOssFile, TheCleanCopyLoads) {
  EXPECT_EQ(load_error_after([](GgufWriter&, auto&) {}), "");
}

TEST(GptOssFile, SinksOfTheWrongShape) {
  expect_one_line_naming(load_error_after([](GgufWriter& w, auto& skip) {
                           replace_f32(w, skip, "blk.1.attn_sinks.weight", {3});
                         }),
                         "tensor blk.1.attn_sinks.weight has shape [3], expected [4]");
}

TEST(GptOssFile, MissingSinks) {
  expect_one_line_naming(
      load_error_after([](GgufWriter&, auto& skip) { skip.push_back("blk.0.attn_sinks.weight"); }),
      "missing tensor blk.0.attn_sinks.weight");
}

TEST(GptOssFile, ExpertCountKeyAboveTheTensors) {
  expect_one_line_naming(
      load_error_after([](GgufWriter& w, auto&) { w.set_u32("gpt-oss.expert_count", 5); }),
      "tensor blk.0.ffn_gate_inp.weight has shape [4, 64], expected [5, 64] (expert count 5)");
}

TEST(GptOssFile, ExpertsUsedAboveTheCount) {
  expect_one_line_naming(
      load_error_after([](GgufWriter& w, auto&) { w.set_u32("gpt-oss.expert_used_count", 6); }),
      "gpt-oss.expert_used_count 6 exceeds gpt-oss.expert_count 4");
}

TEST(GptOssFile, ExpertStackOfAnotherCount) {
  expect_one_line_naming(load_error_after([](GgufWriter& w, auto& skip) {
                           replace_f32(w, skip, "blk.1.ffn_down_exps.weight", {3, 64, 64});
                         }),
                         "tensor blk.1.ffn_down_exps.weight has shape [3, 64, 64], expected "
                         "[4, 64, 64] (expert_count experts)");
}

TEST(GptOssFile, ExpertBiasesOfAnotherCount) {
  expect_one_line_naming(load_error_after([](GgufWriter& w, auto& skip) {
                           replace_f32(w, skip, "blk.0.ffn_up_exps.bias", {3, 64});
                         }),
                         "tensor blk.0.ffn_up_exps.bias has shape [3, 64], expected [4, 64]");
  expect_one_line_naming(load_error_after([](GgufWriter& w, auto& skip) {
                           replace_f32(w, skip, "blk.1.ffn_gate_inp.bias", {5});
                         }),
                         "tensor blk.1.ffn_gate_inp.bias has shape [5], expected [4]");
}

TEST(GptOssConfig, SwigluLimitMustBePositive) {
  auto c = parse_hf_config(R"({"model_type": "gpt_oss", "vocab_size": 64, "hidden_size": 32,
      "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 8, "num_local_experts": 4,
      "num_experts_per_tok": 2, "swiglu_limit": -1})",
                           "config.json");
  ASSERT_TRUE(c.is_ok()) << c.message();
  auto s = read_hf_spec(*c);
  ASSERT_FALSE(s.is_ok());
  expect_one_line_naming(s.message(), "swiglu_limit: must be positive");
}

// The converted file says what the HF directory says: two sliding / full layers, the clamped
// SwiGLU, the MoE sizes; and its blocks need sinks, so a GPU without them takes no layer.
TEST(GptOssPlacement, AGpuWithoutSinksTakesNoLayer) {
  LoadOptions opt;
  opt.n_threads = 1;
  opt.use_weight_cache = false;
  auto model = load_model(converted(), opt);
  ASSERT_TRUE(model.is_ok()) << model.message();
  const HParams& hp = model.value()->hparams();
  EXPECT_EQ(hp.layers[0].window, 8);
  EXPECT_EQ(hp.layers[1].window, 0);
  EXPECT_EQ(hp.activation, FfnActivation::kSwigluClamped);
  EXPECT_FLOAT_EQ(hp.swiglu_limit, 7.0f);
  EXPECT_EQ(hp.n_expert, 4);
  EXPECT_EQ(hp.n_expert_used, 2);
  const uint32_t need = model.value()->needed_features();
  EXPECT_TRUE(need & Backend::kAttentionSinks);
  EXPECT_TRUE(need & Backend::kClampedSwiglu);
  // Even a GPU that ran every other block (MoE and the clamped SwiGLU included) is refused.
  const GpuCandidate gpu{"cuda:test", ~uint32_t(Backend::kAttentionSinks)};
  const LayerPlacement plan =
      place_layers(kGpuLayersAll, hp.n_layer, need, &gpu, "", [] { return GpuLayerCosts{}; });
  EXPECT_EQ(plan.gpu_layers, 0);
  EXPECT_NE(plan.gpu_refused.find("attention sinks"), std::string::npos) << plan.gpu_refused;
}

}  // namespace
}  // namespace hearth
