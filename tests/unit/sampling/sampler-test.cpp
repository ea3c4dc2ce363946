// Sampler chain: greedy, top-k / top-p / min-p / temperature effects, repetition, presence and
// frequency penalties, and same seed => same output.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "sampling/sampler.h"

namespace hearth {
namespace {

SamplingParams off() {  // every stage off, a fixed seed
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  return p;
}

std::set<int32_t> support(const SamplingParams& p, const std::vector<float>& logits,
                          std::vector<int32_t> history = {}, int draws = 4000) {
  Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) seen.insert(s.sample(logits.data(), logits.size(), history));
  return seen;
}

// probabilities from logits {3, 2, 1, 0, -1}: 0.636, 0.234, 0.086, 0.032, 0.012
const std::vector<float> kLogits = {1.0f, 3.0f, -1.0f, 2.0f, 0.0f};  // ranks: 1, 3, 0, 4, 2

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p = off();
  p.temperature = 0.0f;
  Sampler s(p);
  EXPECT_EQ(s.sample(kLogits.data(), 5, {}), 1);
  const std::vector<float> tie = {0.5f, 2.0f, 2.0f};
  EXPECT_EQ(s.sample(tie.data(), 3, {}), 1);
  p.temperature = -1.0f;
  Sampler neg(p);
  EXPECT_EQ(neg.sample(kLogits.data(), 5, {}), 1);
}

TEST(Sampler, AllStagesOffSamplesEveryToken) {
  EXPECT_EQ(support(off(), kLogits), (std::set<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, TopKKeepsKBest) {
  SamplingParams p = off();
  p.top_k = 2;
  EXPECT_EQ(support(p, kLogits), (std::set<int32_t>{1, 3}));
  p.top_k = 1;
  EXPECT_EQ(support(p, kLogits), (std::set<int32_t>{1}));
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
  SamplingParams p = off();
  p.top_p = 0.8f;  // 0.636 < 0.8 <= 0.870
  EXPECT_EQ(support(p, kLogits), (std::set<int32_t>{1, 3}));
  p.top_p = 0.5f;
  EXPECT_EQ(support(p, kLogits), (std::set<int32_t>{1}));
  p.top_p = 0.9f;  // 0.870 < 0.9 <= 0.956
  EXPECT_EQ(support(p, kLogits), (std::set<int32_t>{0, 1, 3}));
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplingParams p = off();
  p.min_p = 0.3f;  // keeps p >= 0.3 * 0.636: tokens 1 (0.636) and 3 (0.234)
  EXPECT_EQ(support(p, kLogits), (std::set<int32_t>{1, 3}));
  p.min_p = 0.1f;  // 0.086 >= 0.0636 keeps token 0 as well
  EXPECT_EQ(support(p, kLogits), (std::set<int32_t>{0, 1, 3}));
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  auto freq_of_best = [](float t) {
    SamplingParams p = off();
    p.temperature = t;
    Sampler s(p);
    int best = 0;
    for (int i = 0; i < 20000; ++i) best += s.sample(kLogits.data(), 5, {}) == 1;
    return best / 20000.0;
  };
  const double cold = freq_of_best(0.25f), base = freq_of_best(1.0f), hot = freq_of_best(4.0f);
  EXPECT_GT(cold, 0.95);
  EXPECT_NEAR(base, 0.636, 0.03);
  EXPECT_LT(hot, 0.40);
}

TEST(Sampler, SameSeedSameOutputDifferentSeedDiffers) {
  SamplingParams p = off();
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.7f);
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(s.sample(logits.data(), 100, out));
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
  p.seed = 43;
  Sampler s(p);
  EXPECT_EQ(s.seed(), 43u);
  p.seed = 0xFFFFFFFF;
  Sampler random(p);
  EXPECT_NE(random.seed(), 0xFFFFFFFFu);
}

TEST(Sampler, RepetitionPenaltyLlamaCppSemantics) {
  SamplingParams p = off();
  p.temperature = 0.0f;
  p.repeat_penalty = 2.0f;
  // Positive logit divided: 3 -> 1.5 < 2, so token 3 wins after token 1 was seen.
  std::vector<int32_t> hist = {1};
  EXPECT_EQ(Sampler(p).sample(kLogits.data(), 5, hist), 3);
  // Negative logits multiplied: both -0.5; the unseen one wins.
  const std::vector<float> neg = {-0.5f, -0.5f};
  std::vector<int32_t> seen0 = {0};
  EXPECT_EQ(Sampler(p).sample(neg.data(), 2, seen0), 1);
  // Outside the last-N window there is no penalty.
  p.repeat_last_n = 2;
  std::vector<int32_t> old = {1, 4, 4};
  EXPECT_EQ(Sampler(p).sample(kLogits.data(), 5, old), 1);
  p.repeat_last_n = -1;  // whole history
  EXPECT_EQ(Sampler(p).sample(kLogits.data(), 5, old), 3);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplingParams p = off();
  p.temperature = 0.0f;
  const std::vector<float> l = {1.0f, 1.4f};
  std::vector<int32_t> once = {1};
  std::vector<int32_t> thrice = {1, 1, 1};
  p.presence_penalty = 0.5f;  // 1.4 - 0.5 = 0.9 < 1.0
  EXPECT_EQ(Sampler(p).sample(l.data(), 2, once), 0);
  p.presence_penalty = 0.3f;  // 1.1 > 1.0
  EXPECT_EQ(Sampler(p).sample(l.data(), 2, thrice), 1);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.2f;  // once: 1.2 > 1.0; three times: 0.8 < 1.0
  EXPECT_EQ(Sampler(p).sample(l.data(), 2, once), 1);
  EXPECT_EQ(Sampler(p).sample(l.data(), 2, thrice), 0);
}

TEST(Sampler, SetParamsKeepsRngState) {
  SamplingParams p = off();
  std::vector<float> logits(50, 0.0f);
  Sampler a(p), b(p);
  for (int i = 0; i < 10; ++i) a.sample(logits.data(), 50, {}), b.sample(logits.data(), 50, {});
  p.top_k = 50;
  b.set_params(p);
  EXPECT_EQ(b.params().top_k, 50);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(a.sample(logits.data(), 50, {}), b.sample(logits.data(), 50, {}));
  }
}

TEST(Sampler, NanAndInfiniteLogitsAreSafe) {
  SamplingParams p = off();
  const std::vector<float> l = {NAN, 1.0f, -INFINITY};
  EXPECT_EQ(support(p, l, {}, 200), (std::set<int32_t>{1}));
  p.temperature = 0.0f;
  EXPECT_EQ(Sampler(p).sample(l.data(), 3, {}), 1);
}

}  // namespace
}  // namespace hearth
