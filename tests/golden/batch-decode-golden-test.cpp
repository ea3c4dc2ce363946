// A decode step of B sequences (one forward over B one-token segments: Phase::kDecodeBatch, the
// batched decode matmul on CUDA) against each sequence decoded alone (Phase::kDecode, the GEMV):
// logits within 1e-3 max row relative error, over several steps, with prompts of different
// lengths so every segment attends over its own context. On the CPU by default; with
// `golden_test --gpu-layers=all` on the GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <memory>
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
  // f32 rows by default (both sides round nothing); f16 where the GPU's batch op has forms only
  // for 16-bit and q8_0 rows (the masked layers' decode kernels).
  KvCacheTypes cache = test::kF32Cache;
  // The CPU's decode step form (CpuOptions::decode_lanes): kOn runs every step of 4+ sequences
  // (2 threads) as lanes, kOff as one pass; the default suite leaves it to the timing.
  CpuOptions::Lanes lanes = CpuOptions::Lanes::kAuto;
};

const KvCacheTypes kF16Cache{DType::F16, DType::F16};

std::string batch_case_name(const testing::TestParamInfo<BatchCase>& info) {
  std::string n = (info.param.file.empty() ? info.param.dir : info.param.file) + "_B" +
                  std::to_string(info.param.batch);
  if (info.param.lanes != CpuOptions::Lanes::kAuto)
    n += std::string("_lanes_") + lanes_name(info.param.lanes);
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// The case's model, and B sequences of golden prompts, each prefilled into two caches: `alone`
// (stepped one sequence at a time, the reference) and `batched` (stepped together).
class BatchDecodeGoldenTest : public testing::TestWithParam<BatchCase> {
 protected:
  static constexpr int64_t kCap = 96;

  // Sequence i's prompt: the first prompt_len(i) golden tokens.
  void prefill_sequences(const std::function<size_t(int)>& prompt_len) {
    const BatchCase& c = GetParam();
    const std::string dir = test::shared_path("goldens/" + c.dir);
    g_ = test::load_golden(dir);
    LoadOptions opt;
    opt.n_threads = 2;
    opt.gpu_layers = golden_gpu_layers();
    opt.cpu.decode_lanes = c.lanes;
    auto loaded = Engine::load(c.file.empty() ? dir : dir + "/" + c.file, opt);
    ASSERT_TRUE(loaded.is_ok()) << loaded.message();
    engine_ = std::move(loaded).value();
    const Model& m = engine_->model();
    next_.resize(size_t(c.batch));
    for (int i = 0; i < c.batch; ++i) {
      const size_t len = prompt_len(i);
      ASSERT_LE(len, g_.input_ids.size());
      const std::vector<int32_t> prompt(g_.input_ids.begin(), g_.input_ids.begin() + long(len));
      for (auto* set : {&alone_, &batched_}) {
        auto kv = m.new_kv_cache(kCap, c.cache);
        ASSERT_TRUE(kv.is_ok()) << kv.message();
        set->push_back(std::move(kv).value());
        std::vector<float> logits;
        ASSERT_TRUE(m.prefill(set->back(), prompt, scratch_alone_, &logits).is_ok());
        next_[size_t(i)] = greedy_argmax(logits.data(), m.hparams().n_vocab);
      }
    }
  }

  test::Golden g_;
  std::shared_ptr<Engine> engine_;
  std::vector<KvCache> alone_, batched_;
  std::vector<int32_t> next_;  // each sequence's next token (greedy, from `alone`)
  ForwardScratch scratch_alone_, scratch_batch_;
};

// The bound of a pass of `tokens` rows against each sequence alone. On the CPU both sides run the
// same kernels on the same int8 activations: 1e-3. On the GPU:
// - x in float on one side, int8 on the other: 3e-2. From 17 rows every quantized matmul takes
//   the fp16 form of the batched matmul (kMatmulBatchHalfMinTokens), and above 4 rows a Q4_K_M
//   file's Q6_K tensors take the float GEMM (the batched int8 matmul has no Q6_K), where the
//   sequence alone rounds x to int8 (a step of max/127 a 32-block: ~0.7% rms of x). The two then
//   differ by the int8 side's own error: kjv-13m Q4_0 / Q4_K_M 2e-3 to 1.8e-2 at 5-39 rows (H100,
//   H200);
// - else, with f16 rows: 5e-3. Each side appends the K/V rows it computed, and where those differ
//   in their last bits an element can round to the neighbouring f16 (2^-11 apart), which the next
//   steps attend to: kjv-13m Q4_0 at 9 rows 2e-4 at the first step, 2.3e-3 at the third (H100),
//   against 5.7e-4 over f32 rows;
// - else 1e-3.
// A batching fault (a row at another position, another sequence's cache) is off by O(1).
double batch_bound(const BatchCase& c, int64_t tokens) {
  if (golden_gpu_layers() == 0) return 1e-3;
  const bool q6k_gemm = c.file.find("q4_k_m") != std::string::npos && tokens > 4;
  if (tokens >= 17 || q6k_gemm) return 3e-2;
  return c.cache.k == DType::F16 || c.cache.v == DType::F16 ? 5e-3 : 1e-3;
}

TEST_P(BatchDecodeGoldenTest, StepOfManySequencesMatchesEachAlone) {
  const BatchCase& c = GetParam();
  // Sequence i: a prompt of 2 + (5 i mod 13) golden tokens.
  prefill_sequences([](int i) { return 2 + size_t(5 * i) % 13; });
  if (HasFatalFailure()) return;
  const Model& m = engine_->model();
  const int64_t n_vocab = m.hparams().n_vocab;
  const int B = c.batch;
  constexpr int kSteps = 3;
  std::vector<KvCache>& alone = alone_;
  std::vector<KvCache>& batched = batched_;
  std::vector<int32_t>& next = next_;
  const double bound = batch_bound(c, B);
  if (golden_gpu_layers() == 0 && c.lanes != CpuOptions::Lanes::kAuto)  // the option reached it
    EXPECT_EQ(m.head_backend()->decode_lanes(B) > 1, c.lanes == CpuOptions::Lanes::kOn);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<BatchSegment> segs;
    for (int i = 0; i < B; ++i) segs.push_back({&batched[size_t(i)], batched[size_t(i)].used(), 1});
    std::vector<float> got;
    ASSERT_TRUE(m.forward(next, segs, scratch_batch_, &got).is_ok());
    ASSERT_EQ(got.size(), size_t(B * n_vocab));
    std::vector<float> want;
    for (int i = 0; i < B; ++i) {
      std::vector<float> one;
      ASSERT_TRUE(m.decode(alone[size_t(i)], next[size_t(i)], scratch_alone_, &one).is_ok());
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

// A served step that also carries prompt chunks (Phase::kPrefill): runs of one-token segments
// go to the backend's batch attention op, each chunk to its own (forward.cpp). Against each
// sequence alone (decode, or the chunk prefilled): the rows the step picks from (each segment's
// last), within the same bound, with segments ordered decode, decode, chunk, ... so runs break.
TEST_P(BatchDecodeGoldenTest, StepMixingDecodeRowsAndPromptChunksMatchesEachAlone) {
  const BatchCase& c = GetParam();
  // Prompts of 2-8 golden tokens, then chunks of up to 6 more: 14 of the golden's 16.
  prefill_sequences([](int i) { return 2 + size_t(3 * i) % 7; });
  if (HasFatalFailure()) return;
  const Model& m = engine_->model();
  const int64_t n_vocab = m.hparams().n_vocab;
  const int B = c.batch;
  std::vector<int32_t> tokens;
  std::vector<BatchSegment> segs;
  std::vector<float> want;
  for (int i = 0; i < B; ++i) {
    KvCache& kv = batched_[size_t(i)];
    std::vector<float> one;
    if (i % 3 == 2) {  // a prompt chunk of 3-6 more golden tokens
      const size_t at = size_t(kv.used()), n = 3 + size_t(i) % 4;
      ASSERT_LE(at + n, g_.input_ids.size());
      const std::vector<int32_t> chunk(g_.input_ids.begin() + long(at),
                                       g_.input_ids.begin() + long(at + n));
      segs.push_back({&kv, kv.used(), int64_t(n)});
      tokens.insert(tokens.end(), chunk.begin(), chunk.end());
      ASSERT_TRUE(m.prefill(alone_[size_t(i)], chunk, scratch_alone_, &one).is_ok());
    } else {
      segs.push_back({&kv, kv.used(), 1});
      tokens.push_back(next_[size_t(i)]);
      ASSERT_TRUE(m.decode(alone_[size_t(i)], next_[size_t(i)], scratch_alone_, &one).is_ok());
    }
    want.insert(want.end(), one.end() - n_vocab, one.end());
  }
  std::vector<float> got;
  ASSERT_TRUE(m.forward(tokens, segs, scratch_batch_, &got).is_ok());
  ASSERT_EQ(got.size(), want.size());
  const double err = test::max_row_relative_error(got, want, n_vocab);
  std::printf("[ err ] %s/%s B=%d mixed step of %zu tokens: max row relative error %.3g\n",
              c.dir.c_str(), c.file.c_str(), B, tokens.size(), err);
  EXPECT_LE(err, batch_bound(c, int64_t(tokens.size())));
}

// B = 3 stays on the GEMV (at most 4 rows), 9 and 17 take the batched matmul on CUDA (17: its
// fp16 form; Q4_K_M at 9: its Q6_K tensors on the float GEMM; q4_0 at 18: the same form for a dtype
// the int8 form also takes, as the mixed step of 9 sequences does). Qwen3: the per-head q/k norms
// inside the batch's attention op. Gemma 2 (sliding window, soft-capped scores) and gpt-oss (sinks,
// a 128-row window every other layer, YaRN's scaled rotation): the masked forms of that op (on
// CUDA, the decode kernels). 64 sequences of kjv-13m's 4 heads over f16 rows: on CUDA the merged
// blocks of the batch's warp form, with the rotation and append inside (the decode kernels take the
// smaller steps).
INSTANTIATE_TEST_SUITE_P(KjvQuantized, BatchDecodeGoldenTest,
                         testing::Values(BatchCase{"kjv-13m", "kjv-13m-q8_0.gguf", 3},
                                         BatchCase{"kjv-13m", "kjv-13m-q4_0.gguf", 9},
                                         BatchCase{"kjv-13m", "kjv-13m-q4_k_m.gguf", 9},
                                         BatchCase{"kjv-13m", "kjv-13m-q4_k_m.gguf", 17},
                                         BatchCase{"kjv-13m", "kjv-13m-q4_0.gguf", 18},
                                         BatchCase{"kjv-13m", "kjv-13m-q8_0.gguf", 64, kF16Cache},
                                         BatchCase{"qwen3-tiny", "", 5},
                                         BatchCase{"gemma2-tiny", "", 6, kF16Cache},
                                         BatchCase{"gpt-oss-tiny", "", 9, kF16Cache}),
                         batch_case_name);

// The CPU's lanes (a group of sequences a thread, forward-lanes.cpp) against each sequence alone,
// forced on and off: lanes of uneven size (5 and 9 over 2 threads), lanes of 2 and 3 rows, and
// the masked and normed attention forms inside a lane. (On the GPU the option changes nothing:
// these repeat cases above.)
constexpr auto kOn = CpuOptions::Lanes::kOn;
constexpr auto kOff = CpuOptions::Lanes::kOff;
INSTANTIATE_TEST_SUITE_P(
    Lanes, BatchDecodeGoldenTest,
    testing::Values(BatchCase{"kjv-13m", "kjv-13m-q8_0.gguf", 8, test::kF32Cache, kOn},
                    BatchCase{"kjv-13m", "kjv-13m-q8_0.gguf", 8, test::kF32Cache, kOff},
                    BatchCase{"kjv-13m", "kjv-13m-q4_k_m.gguf", 9, kF16Cache, kOn},
                    BatchCase{"qwen3-tiny", "", 5, test::kF32Cache, kOn},
                    BatchCase{"gemma2-tiny", "", 6, kF16Cache, kOn},
                    BatchCase{"gpt-oss-tiny", "", 9, kF16Cache, kOn}),
    batch_case_name);

}  // namespace
}  // namespace hearth
