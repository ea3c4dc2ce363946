// Mistral's sliding window, honoured: a tiny random Mistral whose window (5) is far shorter than
// the prompt gives the float64 reference's logits with the window (tiny-model.h, computed from
// the definition, not by the engine), not the full-attention ones, through a chunked prefill
// and decode steps whose positions wrap the layer's ring cache; the ring's memory is bounded by
// the window; rewinds that the ring can no longer serve start over.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "model/model.h"
#include "support/test-data.h"
#include "tiny-model-load.h"
#include "tiny-model.h"

namespace hearth {
namespace {

std::shared_ptr<Model> load_tiny(const test::TinyModel& m, const std::string& extra = "") {
  return test::write_and_load(m, "tiny-" + std::to_string(m.window) + std::to_string(extra.size()),
                              extra);
}

std::vector<int32_t> prompt(int64_t n, int64_t vocab) {
  std::mt19937 rng(3);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint32_t(vocab));
  return ids;
}

// f32 caches: the reference logits are f32 math held to 1e-4, and the byte counts are f32's
// (the cache types have their own bounds: tests/golden/kv-types-golden-test.cpp).
const KvCacheTypes kF32{DType::F32, DType::F32};

TEST(SlidingWindow, MistralWindowGivesReferenceLogitsNotFullAttention) {
  test::TinyModel m;
  m.window = 5;
  m.make();
  auto model = load_tiny(m);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->hparams().layers[0].window, 5);
  const auto ids = prompt(40, m.vocab);
  const auto want = m.reference_logits(ids, m.window);
  const auto full = m.reference_logits(ids, 0);
  auto kv = model->new_kv_cache(64, kF32);
  ASSERT_TRUE(kv.is_ok());
  ForwardScratch scratch;
  std::vector<float> logits;
  ASSERT_TRUE(model->prefill(*kv, ids, scratch, &logits, true).is_ok());
  EXPECT_LE(test::max_row_error(logits, want, m.vocab), 1e-4);
  // The case can fail: full attention is far from the windowed reference here.
  EXPECT_GT(test::max_row_error(logits, full, m.vocab), 1e-2);
}

TEST(SlidingWindow, RingCacheKeepsReferenceLogitsPastItsRowsAndIsBoundedByTheWindow) {
  test::TinyModel m;
  m.window = 5;
  m.make();
  auto model = load_tiny(m);
  ASSERT_TRUE(model);
  const int64_t ctx = 8192, n = 700;  // > window + one pass (517 rows): the ring wraps
  auto kv = model->new_kv_cache(ctx, kF32);
  ASSERT_TRUE(kv.is_ok());
  const int64_t ring = m.window + kMaxTokensPerPass;
  for (int64_t l = 0; l < m.layers; ++l) EXPECT_EQ(kv->ring_rows(l), ring);
  // Memory: window + one pass of rows per sliding layer, whatever the context.
  EXPECT_EQ(kv->bytes(), uint64_t(m.layers * ring * m.kv_heads * m.head_dim * 8));
  auto big = model->new_kv_cache(ctx * 4, kF32);
  ASSERT_TRUE(big.is_ok());
  EXPECT_EQ(big->bytes(), kv->bytes());

  const auto ids = prompt(n, m.vocab);
  const auto want = m.reference_logits(ids, m.window);
  ForwardScratch scratch;
  std::vector<float> got, step;
  const int64_t prefilled = 600;  // two chunks (512 + 88), then decode steps
  ASSERT_TRUE(
      model->prefill(*kv, {ids.begin(), ids.begin() + prefilled}, scratch, &got, true).is_ok());
  for (int64_t t = prefilled; t < n; ++t) {
    ASSERT_TRUE(model->decode(*kv, ids[size_t(t)], scratch, &step).is_ok());
    got.insert(got.end(), step.begin(), step.end());
  }
  EXPECT_LE(test::max_row_error(got, want, m.vocab), 1e-4);

  // A rewind the ring can still serve keeps the prefix; one past it starts over.
  EXPECT_EQ(kv->reusable_prefix(n - 1), n - 1);
  EXPECT_EQ(kv->reusable_prefix(100), 0);
}

TEST(SlidingWindow, ContextWithinTheWindowNeedsNoRing) {
  test::TinyModel m;
  m.window = 4096;
  m.make();
  auto model = load_tiny(m);
  ASSERT_TRUE(model);
  auto kv = model->new_kv_cache(256, kF32);
  ASSERT_TRUE(kv.is_ok());
  EXPECT_EQ(kv->ring_rows(0), 0);
  EXPECT_EQ(kv->bytes(), uint64_t(m.layers * 256 * m.kv_heads * m.head_dim * 8));
}

}  // namespace
}  // namespace hearth
