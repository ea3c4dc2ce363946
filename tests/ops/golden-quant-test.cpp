// Quantizers vs files made by llama.cpp's own converter/quantizer: re-quantizing the same bf16
// source weights must give the same bytes (Q8_0, Q4_0) and at most the same RMSE (K-quants).
// Q/K projections are skipped: llama.cpp permutes their rows before quantizing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quantize.h"
#include "kernels/ref/quant-ref.h"
#include "model-files.h"
#include "support/test-data.h"
#include "tensor/dtype.h"

namespace hearth {
namespace {

// Source tensors in HF names -> the GGUF names llama.cpp gives them (per layer: blk.N.).
std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string pre = "model.layers.";
  if (hf.rfind(pre, 0) != 0) return "";
  const size_t dot = hf.find('.', pre.size());
  const std::string layer = hf.substr(pre.size(), dot - pre.size());
  const std::string rest = hf.substr(dot + 1);
  static const std::pair<const char*, const char*> map[] = {
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  for (const auto& [from, to] : map)
    if (rest == from) return "blk." + layer + "." + to;
  return "";
}

struct Comparison {
  int tensors = 0;
  int64_t blocks = 0, mismatched_blocks = 0;
  double sq_err_ours = 0, sq_err_theirs = 0, sq_ref = 0;
  std::vector<std::string> types;
};

constexpr int64_t kMaxRowsPerTensor = 512;  // enough blocks; keeps the qemu run short

Comparison compare(const std::string& model, const std::string& gguf, DType only) {
  Comparison c;
  std::string err;
  const auto src =
      test::read_safetensors(test::shared_path("goldens/" + model + "/model.safetensors"), &err);
  EXPECT_TRUE(err.empty()) << err;
  const auto ggf =
      test::read_gguf_tensors(test::shared_path("goldens/" + model + "/" + gguf), &err);
  EXPECT_TRUE(err.empty()) << err;
  for (const auto& [hf, st] : src.tensors) {
    const std::string name = gguf_name(hf);
    const auto it = ggf.tensors.find(name);
    if (name.empty() || it == ggf.tensors.end() || it->second.type != uint32_t(only)) continue;
    const test::RawTensor& q = it->second;
    EXPECT_EQ(q.shape, st.shape) << name;
    if (q.shape != st.shape) continue;
    const int64_t n = st.shape.back();
    const uint64_t rb = *row_bytes(only, uint64_t(n));
    const uint32_t bs = dtype_info(only).block_size, bb = dtype_info(only).block_bytes;
    std::vector<uint8_t> ours(rb);
    std::vector<float> deq_ours(static_cast<size_t>(n)), deq_theirs(static_cast<size_t>(n));
    ++c.tensors;
    const int64_t rows = std::min<int64_t>(kMaxRowsPerTensor, q.nbytes / rb);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> x = test::float_row(st, r);
      EXPECT_TRUE(kernels::quantize_row(only, x.data(), ours.data(), n).is_ok());
      const uint8_t* theirs = q.data + uint64_t(r) * rb;
      for (int64_t b = 0; b < n / bs; ++b) {
        ++c.blocks;
        if (std::memcmp(ours.data() + b * bb, theirs + b * bb, bb) != 0) ++c.mismatched_blocks;
      }
      auto deq = [&](const void* in, float* out) {
        switch (only) {
          case DType::Q8_0:
            kernels::ref::dequantize_q8_0(in, out, n);
            break;
          case DType::Q4_0:
            kernels::ref::dequantize_q4_0(in, out, n);
            break;
          case DType::Q4_K:
            kernels::ref::dequantize_q4_k(in, out, n);
            break;
          case DType::Q5_K:
            kernels::ref::dequantize_q5_k(in, out, n);
            break;
          case DType::Q6_K:
            kernels::ref::dequantize_q6_k(in, out, n);
            break;
          default:
            ADD_FAILURE() << "no dequantizer for the comparison";
        }
      };
      deq(ours.data(), deq_ours.data());
      deq(theirs, deq_theirs.data());
      for (int64_t i = 0; i < n; ++i) {
        c.sq_err_ours += std::pow(double(deq_ours[size_t(i)]) - x[size_t(i)], 2);
        c.sq_err_theirs += std::pow(double(deq_theirs[size_t(i)]) - x[size_t(i)], 2);
        c.sq_ref += double(x[size_t(i)]) * x[size_t(i)];
      }
    }
  }
  return c;
}

void expect_byte_identical(const std::string& model, const std::string& gguf, DType t) {
  const Comparison c = compare(model, gguf, t);
  EXPECT_GT(c.tensors, 0) << gguf << " has no comparable " << dtype_name(t) << " tensors";
  EXPECT_EQ(c.mismatched_blocks, 0) << gguf << ": " << c.mismatched_blocks << " of " << c.blocks
                                    << " " << dtype_name(t) << " blocks differ";
}

void expect_at_least_as_accurate(const std::string& model, const std::string& gguf, DType t) {
  const Comparison c = compare(model, gguf, t);
  ASSERT_GT(c.tensors, 0) << gguf << " has no comparable " << dtype_name(t) << " tensors";
  const double ours = std::sqrt(c.sq_err_ours / c.sq_ref),
               theirs = std::sqrt(c.sq_err_theirs / c.sq_ref);
  EXPECT_LE(ours, theirs * (1 + 1e-9)) << gguf << " " << dtype_name(t);
  std::printf(
      "  %s %s: %d tensors, %lld blocks, relative RMSE ours %.6g ggml %.6g, %lld blocks differ\n",
      gguf.c_str(), dtype_name(t), c.tensors, (long long)c.blocks, ours, theirs,
      (long long)c.mismatched_blocks);
}

TEST(GoldenQuant, Q8_0BytesMatchLlamaCpp) {
  expect_byte_identical("llama2-tiny", "llama2-tiny-q8_0.gguf", DType::Q8_0);
  expect_byte_identical("llama-k256", "llama-k256-q8_0.gguf", DType::Q8_0);
  expect_byte_identical("kjv-13m", "kjv-13m-q8_0.gguf", DType::Q8_0);
}

TEST(GoldenQuant, Q4_0BytesMatchLlamaCpp) {
  expect_byte_identical("llama-k256", "llama-k256-q4_0.gguf", DType::Q4_0);
  expect_byte_identical("kjv-13m", "kjv-13m-q4_0.gguf", DType::Q4_0);
  expect_byte_identical("llama3-tiny", "llama3-tiny-q4_0.gguf", DType::Q4_0);
}

TEST(GoldenQuant, KQuantsAtLeastAsAccurateAsLlamaCpp) {
  expect_at_least_as_accurate("llama-k256", "llama-k256-q4_k_m.gguf", DType::Q4_K);
  expect_at_least_as_accurate("llama-k256", "llama-k256-q5_k_m.gguf", DType::Q5_K);
  expect_at_least_as_accurate("llama-k256", "llama-k256-q6_k.gguf", DType::Q6_K);
  expect_at_least_as_accurate("kjv-13m", "kjv-13m-q4_k_m.gguf", DType::Q4_K);
  expect_at_least_as_accurate("kjv-13m", "kjv-13m-q4_k_m.gguf", DType::Q6_K);
}

}  // namespace
}  // namespace hearth
