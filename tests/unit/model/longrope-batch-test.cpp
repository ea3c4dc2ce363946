// LongRoPE's two tables in a decode step of many sequences: each sequence rotates by the table
// its own cache size picks (the long one past the original context), so a step that mixes both
// kinds runs them in runs of one table and gives each sequence the logits it gets decoded alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "model/model.h"
#include "support/test-data.h"
#include "tiny-model-load.h"
#include "tiny-model.h"

namespace hearth {
namespace {

const KvCacheTypes kF32{DType::F32, DType::F32};

// max |a - b| / max |b| over one or more rows taken together.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    mag = std::max(mag, double(std::fabs(b[i])));
  }
  return a.size() == b.size() && mag > 0 ? diff / mag : 1e30;
}

// Capacities up to 16 (the original context) take the short factors, larger ones the long.
const char* kLongRope =
    R"(, "original_max_position_embeddings": 16, "rope_scaling": {"rope_type": "longrope",
    "short_factor": [1.0, 1.3, 1.7, 2.2], "long_factor": [2.0, 5.0, 11.0, 23.0]})";

std::shared_ptr<Model> load_longrope(test::TinyModel& m) {
  m.make(21);
  return test::write_and_load(m, "tiny-longrope", kLongRope);
}

TEST(LongRopeBatch, MixedTablesInOneStepMatchEachSequenceAlone) {
  test::TinyModel m;
  auto model = load_longrope(m);
  ASSERT_TRUE(model);
  // Short, long, long, short, long: runs of both tables, and a run broken by the other table.
  const std::vector<int64_t> caps = {12, 48, 40, 16, 64};
  const std::vector<size_t> lens = {5, 7, 3, 9, 4};
  std::mt19937 rng(5);
  std::vector<KvCache> alone, batched;
  std::vector<int32_t> next;
  ForwardScratch s_alone, s_batch;
  for (size_t i = 0; i < caps.size(); ++i) {
    std::vector<int32_t> ids(lens[i]);
    for (auto& id : ids) id = int32_t(rng() % uint32_t(m.vocab));
    for (auto* set : {&alone, &batched}) {
      auto kv = model->new_kv_cache(caps[i], kF32);
      ASSERT_TRUE(kv.is_ok()) << kv.message();
      set->push_back(std::move(kv).value());
      std::vector<float> logits;
      ASSERT_TRUE(model->prefill(set->back(), ids, s_alone, &logits).is_ok());
    }
    next.push_back(int32_t((i * 7 + 3) % size_t(m.vocab)));
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<BatchSegment> segs;
    for (auto& kv : batched) segs.push_back({&kv, kv.used(), 1, false});
    std::vector<float> got;
    ASSERT_TRUE(model->forward(next, segs, s_batch, &got).is_ok());
    ASSERT_EQ(got.size(), caps.size() * size_t(m.vocab));
    for (size_t i = 0; i < caps.size(); ++i) {
      std::vector<float> want;
      ASSERT_TRUE(model->decode(alone[i], next[i], s_alone, &want).is_ok());
      const std::vector<float> row(got.begin() + long(i * size_t(m.vocab)),
                                   got.begin() + long((i + 1) * size_t(m.vocab)));
      EXPECT_LE(rel_diff(row, want), 1e-5) << "sequence " << i << " step " << step;
    }
    for (auto& id : next) id = int32_t((id * 5 + 1) % int32_t(m.vocab));
  }
}

// The case can fail: the same tokens in a cache past the original context rotate otherwise.
TEST(LongRopeBatch, TheTablesGiveDifferentLogits) {
  test::TinyModel m;
  auto model = load_longrope(m);
  ASSERT_TRUE(model);
  const std::vector<int32_t> ids = {3, 17, 29, 40, 8, 51, 12};
  std::vector<float> out[2];
  int k = 0;
  for (int64_t cap : {16, 17}) {
    auto kv = model->new_kv_cache(cap, kF32);
    ASSERT_TRUE(kv.is_ok());
    ForwardScratch scratch;
    ASSERT_TRUE(model->prefill(*kv, ids, scratch, &out[k++]).is_ok());
  }
  EXPECT_GT(rel_diff(out[0], out[1]), 1e-2);
}

}  // namespace
}  // namespace hearth
