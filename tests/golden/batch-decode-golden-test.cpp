// A decode step of B sequences (one forward over B one-token segments: Phase::kDecodeBatch, the
// batched decode matmul on CUDA) against each sequence decoded alone (Phase::kDecode, the GEMV):
// logits within 1e-3 max row relative error, over several steps, with prompts of different
// lengths so every segment attends over its own context. On the CPU by default; with
// `golden_test --gpu-layers=all` on the GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "support/golden-data.h"
#include "support/golden-run.h"
#include "support/test-data.h"

namespace hearth {

int golden_gpu_layers();  // golden-test.cpp

namespace {

struct BatchCase {
  std::string dir;   // a golden model directory under goldens/
  std::string file;  // a GGUF in it, or empty: the directory itself (Hugging Face layout)
  int batch;
};

std::string batch_case_name(const testing::TestParamInfo<BatchCase>& info) {
  std::string n = (info.param.file.empty() ? info.param.dir : info.param.file) + "_B" +
                  std::to_string(info.param.batch);
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

class BatchDecodeGoldenTest : public testing::TestWithParam<BatchCase> {};

TEST_P(BatchDecodeGoldenTest, StepOfManySequencesMatchesEachAlone) {
  const BatchCase& c = GetParam();
  const std::string dir = test::shared_path("goldens/" + c.dir);
  const test::Golden g = test::load_golden(dir);
  LoadOptions opt;
  opt.n_threads = 2;
  opt.gpu_layers = golden_gpu_layers();
  auto loaded = Engine::load(c.file.empty() ? dir : dir + "/" + c.file, opt);
  ASSERT_TRUE(loaded.is_ok()) << loaded.message();
  const Model& m = loaded.value()->model();
  const int64_t n_vocab = m.hparams().n_vocab;
  const int B = c.batch;
  constexpr int64_t kCap = 96;
  constexpr int kSteps = 3;

  // Sequence i: a prompt of 2 + (5 i mod 13) golden tokens, prefilled into two caches.
  std::vector<KvCache> alone, batched;
  std::vector<int32_t> next(static_cast<size_t>(B));
  ForwardScratch scratch_alone, scratch_batch;
  for (int i = 0; i < B; ++i) {
    const size_t len = 2 + size_t(5 * i) % 13;
    ASSERT_LE(len, g.input_ids.size());
    const std::vector<int32_t> prompt(g.input_ids.begin(), g.input_ids.begin() + long(len));
    for (auto* set : {&alone, &batched}) {
      auto kv = m.new_kv_cache(kCap, test::kF32Cache);
      ASSERT_TRUE(kv.is_ok()) << kv.message();
      set->push_back(std::move(kv).value());
      std::vector<float> logits;
      ASSERT_TRUE(m.prefill(set->back(), prompt, scratch_alone, &logits).is_ok());
      next[size_t(i)] = greedy_argmax(logits.data(), n_vocab);
    }
  }
  // On the GPU a Q4_K_M file's Q6_K tensors take the fp16 GEMM above 4 rows (the batched int8
  // matmul has no Q6_K), x rounded to fp16 against the GEMV's two int8 levels.
  const bool gemm_mix = golden_gpu_layers() != 0 && c.file.find("q4_k_m") != std::string::npos;
  const double bound = gemm_mix && B > 4 ? 3e-3 : 1e-3;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<BatchSegment> segs;
    for (int i = 0; i < B; ++i) segs.push_back({&batched[size_t(i)], batched[size_t(i)].used(), 1});
    std::vector<float> got;
    ASSERT_TRUE(m.forward(next, segs, scratch_batch, &got).is_ok());
    ASSERT_EQ(got.size(), size_t(B * n_vocab));
    std::vector<float> want;
    for (int i = 0; i < B; ++i) {
      std::vector<float> one;
      ASSERT_TRUE(m.decode(alone[size_t(i)], next[size_t(i)], scratch_alone, &one).is_ok());
      want.insert(want.end(), one.begin(), one.end());
    }
    const double err = test::max_row_relative_error(got, want, n_vocab);
    std::printf("[ err ] %s/%s B=%d step %d: max row relative error %.3g\n", c.dir.c_str(),
                c.file.c_str(), B, step, err);
    EXPECT_LE(err, bound) << "step " << step;
    for (int i = 0; i < B; ++i)
      next[size_t(i)] = greedy_argmax(want.data() + size_t(i) * size_t(n_vocab), n_vocab);
  }
}

// B = 3 stays on the GEMV (at most 4 rows), 9 and 17 take the batched matmul on CUDA (17: three
// 8-token tiles, one partial). Qwen3: the per-head q/k norms inside the batch's attention op.
INSTANTIATE_TEST_SUITE_P(KjvQuantized, BatchDecodeGoldenTest,
                         testing::Values(BatchCase{"kjv-13m", "kjv-13m-q8_0.gguf", 3},
                                         BatchCase{"kjv-13m", "kjv-13m-q4_0.gguf", 9},
                                         BatchCase{"kjv-13m", "kjv-13m-q4_k_m.gguf", 17},
                                         BatchCase{"qwen3-tiny", "", 5}),
                         batch_case_name);

}  // namespace
}  // namespace hearth
