// Q3_K tensors run as Q6_K (model/weight-transcode.h): the rewrite keeps every value bit for bit,
// Q3_K's reference dequantizer reads a block as ggml does (a vector from ggml's
// dequantize_row_q3_K), and a GGUF whose matrices are all Q3_K loads and answers as a float64
// forward pass over the values it holds.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "base/half.h"
#include "formats/gguf.h"
#include "kernels/quant-blocks.h"
#include "kernels/ref/quant-ref.h"
#include "model/model.h"
#include "model/weight-transcode.h"
#include "support/test-data.h"
#include "tiny-model.h"

namespace hearth {
namespace {

using kernels::BlockQ3_K;
using kernels::BlockQ6_K;

std::vector<BlockQ3_K> random_q3_k_blocks(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<BlockQ3_K> b(static_cast<size_t>(n));
  for (auto& x : b) {
    auto* p = reinterpret_cast<uint8_t*>(&x);
    for (size_t i = 0; i + 2 < sizeof x; ++i) p[i] = uint8_t(rng());
    x.d = f32_to_fp16(std::uniform_real_distribution<float>(-0.2f, 0.2f)(rng));
  }
  b[0].d = f32_to_fp16(0.0f);
  b[1].d = 0x7bff;  // the largest finite half
  return b;
}

TEST(WeightTranscode, Q6kHoldsEveryQ3kValueBitForBit) {
  const int n = 512;
  const std::vector<BlockQ3_K> q3 = random_q3_k_blocks(n, 11);
  std::vector<BlockQ6_K> q6(static_cast<size_t>(n));
  transcode_q3_k_to_q6_k(q3.data(), q6.data(), n);
  std::vector<float> want(size_t(n) * 256), got(want.size());
  kernels::ref::dequantize_q3_k(q3.data(), want.data(), int64_t(want.size()));
  kernels::ref::dequantize_q6_k(q6.data(), got.data(), int64_t(got.size()));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << "element " << i << ": " << got[i] << " vs " << want[i];
  EXPECT_EQ(transcode_target(DType::Q3_K), DType::Q6_K);
  EXPECT_FALSE(transcode_target(DType::Q4_K).has_value());
  EXPECT_FALSE(transcode_target(DType::Q2_K).has_value()) << "Q2_K's values need a min term";
}

TEST(WeightTranscode, Q3kDequantizesAsGgml) {
  // One block of random bytes (d = 0.0123) and ggml's dequantize_row_q3_K of it (llama.cpp
  // 2025-02, run outside this repository), every 7th element: all 16 sub-blocks, both halves.
  const uint8_t kBlock[110] = {
      0x01, 0x86, 0x1a, 0xb8, 0x4d, 0x4d, 0x1d, 0x74, 0x9c, 0xb3, 0xff, 0xc5, 0xcc, 0x1c,
      0x82, 0xb6, 0xcd, 0x1b, 0xe0, 0xf9, 0x07, 0x60, 0x87, 0x6f, 0x94, 0xa1, 0x30, 0x26,
      0x19, 0x44, 0xf3, 0x70, 0x3c, 0x11, 0xfa, 0xc9, 0x74, 0x2f, 0xcf, 0x9d, 0x94, 0x69,
      0x5f, 0xdd, 0x46, 0xb6, 0xf9, 0x28, 0xf5, 0xc0, 0xcf, 0x03, 0x24, 0xe1, 0xa5, 0x89,
      0x98, 0x31, 0xd3, 0xe2, 0x23, 0xd8, 0x9f, 0x37, 0x03, 0x49, 0x26, 0x20, 0x6d, 0x65,
      0x3a, 0x16, 0xd8, 0x4f, 0x4b, 0x8b, 0x9d, 0x8c, 0xfb, 0x0e, 0x87, 0x20, 0x87, 0xc2,
      0x14, 0x3d, 0xa4, 0x20, 0xd4, 0xa1, 0x42, 0xcf, 0x40, 0x8e, 0x2b, 0xa1, 0x4e, 0xfc,
      0xde, 0xa0, 0xf3, 0x33, 0x70, 0xbc, 0xf4, 0x43, 0x13, 0x02, 0x4c, 0x22};
  const float kWant[37] = {
      -0x0p+0,     0x1.5408p-1, 0x1.5408p-1, -0x1.0878p+0, 0x1.0878p+0,  -0x1.79dp-1,  0x1.1b5cp+0,
      0x0p+0,      -0x0p+0,     -0x0p+0,     -0x0p+0,      -0x1.eb28p-2, -0x1.6d38p-1, -0x1.6d38p-1,
      -0x1.2e4p+0, 0x1.2e4p+0,  -0x1.79dp-1, -0x1.f7cp-2,  0x1.f7cp-2,   -0x1.79dp-1,  -0x1.79dp-1,
      -0x1.ac3p-2, -0x1.ac3p-2, 0x1.2e4p-4,  0x1.2e4p-4,   -0x1.c56p-4,  0x1.9f98p-1,  0x1.151p-2,
      0x1.8668p-1, 0x0p+0,      -0x0p+0,     0x1.477p-2,   0x1.3ad8p+0,  0x1.3ad8p+0,  -0x1.d844p-1,
      0x1.0878p+0, 0x1.8cb4p-1};
  static_assert(sizeof kBlock == sizeof(BlockQ3_K));
  float y[256];
  kernels::ref::dequantize_q3_k(kBlock, y, 256);
  for (int e = 0, k = 0; e < 256; e += 7, ++k)
    EXPECT_EQ(std::bit_cast<uint32_t>(y[e]), std::bit_cast<uint32_t>(kWant[k])) << "element " << e;
}

// A plain Q3_K quantizer for the test's weights (not ggml's search): per 16-element sub-block a
// scale of amax / 4, the super-block's d = max |scale| / 31, codes rounded and clamped.
std::vector<BlockQ3_K> quantize_q3_k(const std::vector<float>& x) {
  std::vector<BlockQ3_K> out(x.size() / 256);
  for (size_t b = 0; b < out.size(); ++b) {
    const float* v = x.data() + b * 256;
    float sub[16], dmax = 0;
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(v[16 * j + i]));
      sub[j] = amax / 4;
      dmax = std::max(dmax, sub[j]);
    }
    BlockQ3_K& q = out[b];
    q = {};
    q.d = f32_to_fp16(dmax / 31);
    const float d = fp16_to_f32(q.d);
    for (int j = 0; j < 16; ++j) {
      const int s = d > 0 ? std::clamp(int(std::lround(sub[j] / d)), -32, 31) + 32 : 32;
      (j < 8 ? q.scales[j] : q.scales[j - 8]) |= uint8_t((s & 0xF) << (j < 8 ? 0 : 4));
      q.scales[8 + j % 4] |= uint8_t((s >> 4) << (2 * (j / 4)));
      const float step = d * float(s - 32);
      for (int i = 0; i < 16; ++i) {
        const int e = 16 * j + i;
        const int code = step != 0 ? std::clamp(int(std::lround(v[e] / step)), -4, 3) : 0;
        const int n = e / 128, k = (e % 128) / 32, l = e % 32;
        q.qs[32 * n + l] |= uint8_t((code & 3) << (2 * k));
        if (code >= 0) q.hmask[l] |= uint8_t(1 << (4 * n + k));
      }
    }
  }
  return out;
}

TEST(WeightTranscode, Q3kGgufAnswersAsTheValuesItHolds) {
  test::TinyModel t;
  t.model_type = "llama";
  t.vocab = 64, t.hidden = 256, t.heads = 4, t.kv_heads = 2, t.head_dim = 64, t.ff = 512;
  t.make(5);
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", uint32_t(t.hidden));
  w.set_u32("llama.block_count", uint32_t(t.layers));
  w.set_u32("llama.feed_forward_length", uint32_t(t.ff));
  w.set_u32("llama.attention.head_count", uint32_t(t.heads));
  w.set_u32("llama.attention.head_count_kv", uint32_t(t.kv_heads));
  w.set_u32("llama.context_length", 256);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", float(t.eps));
  w.set_f32("llama.rope.freq_base", float(t.theta));
  // GGUF's llama rotates adjacent pairs, so its Q/K rows are HF's permuted per head (as
  // llama.cpp's converter writes them): row h*hd + 2i + j holds HF's h*hd + j*hd/2 + i.
  auto gguf_row = [&](int64_t r) {
    const int64_t hd = t.head_dim, h = r / hd, i = (r % hd) / 2, j = r % 2;
    return h * hd + j * (hd / 2) + i;
  };
  auto put_f32 = [&](const std::string& name, const std::string& hf) {
    const std::vector<float>& v = t.w.at(hf);
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.add_tensor(name, DType::F32, t.shape.at(hf), std::move(bytes));
  };
  // Each matrix quantized to Q3_K; the model's float weights become the values it holds, so the
  // float64 reference runs on exactly what the file says.
  auto put_q3 = [&](const std::string& name, const std::string& hf, bool permute) {
    std::vector<float>& v = t.w.at(hf);
    const std::vector<int64_t>& shape = t.shape.at(hf);
    const std::vector<BlockQ3_K> q = quantize_q3_k(v);
    kernels::ref::dequantize_q3_k(q.data(), v.data(), int64_t(v.size()));
    const int64_t rows = shape[0], row_blocks = shape[1] / 256;
    std::vector<uint8_t> bytes(q.size() * sizeof(BlockQ3_K));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(bytes.data() + r * row_blocks * sizeof(BlockQ3_K),
                  q.data() + (permute ? gguf_row(r) : r) * row_blocks,
                  row_blocks * sizeof(BlockQ3_K));
    w.add_tensor(name, DType::Q3_K, shape, std::move(bytes));
  };
  put_f32("token_embd.weight", "model.embed_tokens.weight");
  put_f32("output_norm.weight", "model.norm.weight");
  put_q3("output.weight", "lm_head.weight", false);
  for (int64_t l = 0; l < t.layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".",
                      h = "model.layers." + std::to_string(l) + ".";
    put_f32(g + "attn_norm.weight", h + "input_layernorm.weight");
    put_f32(g + "ffn_norm.weight", h + "post_attention_layernorm.weight");
    put_q3(g + "attn_q.weight", h + "self_attn.q_proj.weight", true);
    put_q3(g + "attn_k.weight", h + "self_attn.k_proj.weight", true);
    put_q3(g + "attn_v.weight", h + "self_attn.v_proj.weight", false);
    put_q3(g + "attn_output.weight", h + "self_attn.o_proj.weight", false);
    put_q3(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", false);
    put_q3(g + "ffn_up.weight", h + "mlp.up_proj.weight", false);
    put_q3(g + "ffn_down.weight", h + "mlp.down_proj.weight", false);
  }
  const std::string path = test::temp_dir() + "/q3_k.gguf";
  ASSERT_TRUE(w.write(path).is_ok());

  LoadOptions opt;
  opt.n_threads = 2;
  auto model = load_model(path, opt);
  ASSERT_TRUE(model.is_ok()) << model.message();
  const std::vector<int32_t> ids = {3, 17, 42, 8, 63, 0, 29, 11};
  auto kv = (*model)->new_kv_cache(32);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  ForwardScratch scratch;
  std::vector<float> got;
  ASSERT_TRUE((*model)->prefill(*kv, ids, scratch, &got, true).is_ok());
  const std::vector<double> want = t.reference_logits(ids, 0);
  ASSERT_EQ(got.size(), want.size());
  // Per position, relative to the row's largest logit: the activations' int16 / int8 rounding
  // inside the Q6_K dot products, far below what a wrong layout (another weight's values) gives.
  for (size_t p = 0; p < ids.size(); ++p) {
    double scale = 0, worst = 0;
    for (int64_t v = 0; v < t.vocab; ++v) scale = std::max(scale, std::fabs(want[p * 64 + v]));
    for (int64_t v = 0; v < t.vocab; ++v)
      worst = std::max(worst, std::fabs(double(got[p * 64 + v]) - want[p * 64 + v]));
    EXPECT_LT(worst / scale, 1e-2) << "position " << p;
  }
}

}  // namespace
}  // namespace hearth
