// A KV cache committed lazily from a pool (kv/kv-pool.h) against one allocated whole, on the
// golden kjv-13m model: the same logits, bit for bit, for a prompt in several chunks and the
// greedy tokens after it, with blocks taken as positions are written and all given back; a
// pool too small for the sequence stops the forward pass with a clear error.
#include <gtest/gtest.h>

#include "model/model.h"
#include "support/test-data.h"

namespace hearth {
namespace {

class PooledKvModelTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions opt;
    opt.n_threads = 1;
    opt.use_weight_cache = false;
    auto m = load_model(test::shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"), opt);
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = m.value();
  }
  static void TearDownTestSuite() { model_.reset(); }

  // Prompt chunks of 7 tokens (so passes straddle block edges), then n greedy steps: every
  // logits row, in order.
  static std::vector<float> run(KvCache& kv, int n) {
    ForwardScratch scratch;
    std::vector<int32_t> prompt;
    for (int i = 0; i < 45; ++i) prompt.push_back(int32_t(100 + (i * 37) % 900));
    std::vector<float> all, logits;
    for (size_t b = 0; b < prompt.size(); b += 7) {
      std::vector<int32_t> chunk(prompt.begin() + long(b),
                                 prompt.begin() + long(std::min(prompt.size(), b + 7)));
      EXPECT_TRUE(model_->prefill(kv, chunk, scratch, &logits).is_ok());
      all.insert(all.end(), logits.begin(), logits.end());
    }
    for (int i = 0; i < n; ++i) {
      const int32_t next = greedy_argmax(logits.data(), int64_t(logits.size()));
      const Status st = model_->decode(kv, next, scratch, &logits);
      EXPECT_TRUE(st.is_ok()) << st.message();
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  }
  static std::shared_ptr<Model> model_;
};
std::shared_ptr<Model> PooledKvModelTest::model_;

TEST_F(PooledKvModelTest, PooledCacheGivesTheEagerLogits) {
  for (const KvCacheTypes& types : {KvCacheTypes{}, KvCacheTypes{DType::F32, DType::F32}}) {
    auto eager = model_->new_kv_cache(128, types);
    auto pool = model_->kv_pool(256, types);
    auto pooled = model_->new_kv_cache(128, types, pool);
    ASSERT_TRUE(eager.is_ok() && pooled.is_ok());
    const std::vector<float> want = run(*eager, 30);
    const std::vector<float> got = run(*pooled, 30);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_TRUE(want == got) << "pooled logits differ from the eager cache's";
    EXPECT_EQ(pooled->held_blocks(), pool->blocks_for(45 + 30));
    EXPECT_EQ(pool->used_blocks(), pooled->held_blocks());
    pooled = Status::error("dropped");
    EXPECT_EQ(pool->used_blocks(), 0);
  }
}

TEST_F(PooledKvModelTest, AFullPoolStopsTheForwardPassWithAClearError) {
  auto pool = model_->kv_pool(16);  // one block: fewer positions than the prompt
  auto kv = model_->new_kv_cache(128, {}, pool);
  ASSERT_TRUE(kv.is_ok());
  ForwardScratch scratch;
  std::vector<int32_t> prompt(40, 100);
  std::vector<float> logits;
  const Status st = model_->prefill(*kv, prompt, scratch, &logits);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("KV pool is full"), std::string::npos) << st.message();
  EXPECT_EQ(kv->used(), 0);
}

}  // namespace
}  // namespace hearth
