// The sampled device pick (kernels/cuda/sample-pick.cu through CudaBackend::pick) against the CPU
// Sampler (sampling/sampler.h): over fixed logits, the device's draws must follow the CPU chain's
// exact distribution (never a token outside the kept set; a chi-square bound on the counts) for
// each stage combination, penalties included; the same seed draws the same tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "cuda-test-util.h"
#include "sampling/sampler.h"

namespace hearth::test {
namespace {

Backend::PickRule rule_of(const SamplingParams& p) {
  Backend::PickRule r;
  r.temperature = p.temperature, r.top_k = p.top_k, r.top_p = p.top_p, r.min_p = p.min_p;
  r.repeat_penalty = p.repeat_penalty, r.repeat_last_n = p.repeat_last_n;
  r.presence_penalty = p.presence_penalty, r.frequency_penalty = p.frequency_penalty;
  r.seed = p.seed;
  return r;
}

// The CPU chain's probabilities (token -> p) for these logits and history.
std::map<int32_t, double> cpu_distribution(const SamplingParams& p, const std::vector<float>& l,
                                           const std::vector<int32_t>& history) {
  Sampler s(p);
  const SamplingCandidates c = s.candidates(l.data(), int32_t(l.size()), history);
  std::map<int32_t, double> out;
  if (c.picked >= 0) {
    out[c.picked] = 1.0;
    return out;
  }
  for (size_t i = 0; i < c.ids.size(); ++i)
    if (c.weights[i] > 0) out[c.ids[i]] = double(c.weights[i]) / c.total;
  return out;
}

struct Case {
  const char* what;
  SamplingParams p;
  int64_t vocab;
  int draws;
};

std::vector<Case> cases() {
  auto params = [](float t, int k, float top_p, float min_p) {
    SamplingParams p;
    p.temperature = t, p.top_k = k, p.top_p = top_p, p.min_p = min_p;
    p.seed = 1234;
    return p;
  };
  std::vector<Case> c = {
      {"chat defaults (temp 0.8, top-p 0.95, min-p 0.05)", params(0.8f, 0, 0.95f, 0.05f), 1000,
       20000},
      {"top-k 40 only", params(1.0f, 40, 1.0f, 0.0f), 1000, 20000},
      {"top-k 50 + top-p 0.9 + min-p 0.1, temp 0.7", params(0.7f, 50, 0.9f, 0.1f), 1000, 20000},
      {"temperature only, 1.5", params(1.5f, 0, 1.0f, 0.0f), 300, 20000},
      {"min-p above 1: the best only", params(0.8f, 0, 1.0f, 2.0f), 1000, 200},
      {"152k vocabulary, top-p 0.95", params(0.8f, 0, 0.95f, 0.0f), 151936, 4000},
      // min-p keeps ~80% of the mass: top-p (0.99) cuts nothing it keeps, the kernel's one-pass
      // case.
      {"min-p 0.2 tighter than top-p 0.99", params(0.8f, 0, 0.99f, 0.2f), 1000, 20000},
      {"128k vocabulary, min-p 0.05 tighter than top-p 0.99", params(0.8f, 0, 0.99f, 0.05f), 128256,
       4000},
      {"top-k 40 + top-p 0.95 + min-p 0.05 over 128k", params(0.8f, 40, 0.95f, 0.05f), 128256,
       4000},
  };
  SamplingParams pen = params(0.9f, 0, 1.0f, 0.0f);
  pen.repeat_penalty = 1.3f, pen.frequency_penalty = 0.4f, pen.presence_penalty = 0.5f;
  pen.repeat_last_n = 16;
  c.push_back({"penalties over the last 16 tokens", pen, 200, 20000});
  return c;
}

TEST_F(CudaTest, SampledPickFollowsTheSamplerDistribution) {
  // The penalised tokens repeat (frequency) and fall inside and outside the window.
  const std::vector<int32_t> history = {3, 7, 7, 9,  150, 3,  3, 11, 12, 7, 199, 0, 5, 5,  5,  5,
                                        5, 8, 9, 10, 42,  42, 1, 2,  3,  4, 6,   7, 8, 60, 61, 7};
  for (const Case& c : cases()) {
    // Logits spread over ~12 nats so each stage cuts somewhere inside the set.
    const std::vector<float> logits = random_floats(size_t(c.vocab), uint32_t(c.vocab), -6.f, 6.f);
    const auto want = cpu_distribution(c.p, logits, history);
    ASSERT_FALSE(want.empty()) << c.what;
    float* d = dev(logits);
    std::map<int32_t, int> got;
    for (int i = 0; i < c.draws; ++i) {
      // The window restarts each draw (a pick appends its token to the device's history).
      if (i == 0 || c.p.repeat_last_n > 0) {
        ASSERT_TRUE(backend_->begin_picks(rule_of(c.p), history).is_ok()) << c.what;
      }
      backend_->pick(d, c.vocab, i);
      auto t = backend_->picked_token(i);
      ASSERT_TRUE(t.is_ok()) << t.message();
      ++got[t.value()];
    }
    double chi2 = 0;
    int bins = 0;
    for (const auto& [id, n] : got)
      ASSERT_TRUE(want.count(id)) << c.what << ": drew token " << id << ", outside the kept set";
    for (const auto& [id, p] : want) {
      const double expected = p * c.draws;
      if (expected < 5) continue;
      const double diff = (got.count(id) ? got[id] : 0) - expected;
      chi2 += diff * diff / expected;
      ++bins;
    }
    // Six standard deviations above the chi-square's mean: a wrong cut or weight is far beyond.
    const double bound = bins + 6 * std::sqrt(2.0 * std::max(bins, 1));
    EXPECT_LT(chi2, bound) << c.what << " (" << bins << " bins, " << want.size() << " kept)";
  }
}

TEST_F(CudaTest, SampledPicksRepeatForTheSameSeed) {
  const std::vector<float> logits = random_floats(32000, 5, -4.f, 4.f);
  float* d = dev(logits);
  auto draw = [&](uint64_t seed) {
    SamplingParams p;
    p.seed = seed;
    EXPECT_TRUE(backend_->begin_picks(rule_of(p), {}).is_ok());
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      backend_->pick(d, 32000, 100 + i);
      out.push_back(backend_->picked_token(100 + i).value());
    }
    return out;
  };
  const auto a = draw(7), b = draw(7), c = draw(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // A penalties window longer than the device's history is refused, never silently cut.
  Backend::PickRule too_long;
  too_long.temperature = 0.8f, too_long.repeat_penalty = 1.1f, too_long.repeat_last_n = -1;
  EXPECT_FALSE(backend_->can_pick(too_long, 10));
  EXPECT_FALSE(backend_->begin_picks(too_long, {}).is_ok());
}

}  // namespace
}  // namespace hearth::test
