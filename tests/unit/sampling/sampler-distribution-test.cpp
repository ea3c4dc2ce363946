// The sampler's distribution against a plain full-sort reference (written out below, the chain
// as llama.cpp orders it): exact candidate sets and probabilities on random logits for every
// stage combination, ties, NaN/-inf, k beyond V, p = 1, min-p edges, nuclei far larger than the
// cutoff's buckets; the draw's frequencies; temperature 0 against backend.h's greedy_argmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "backend/backend.h"
#include "sampling/sampler.h"

namespace hearth {
namespace {

using Weights = std::map<int32_t, double>;  // token -> probability relative to the best token's

// What the chain allows: every token in `weights` may be a candidate, those in `required` must
// be. They differ only where top-p's cumulative mass lies within kMassSlack of top_p, which float
// weights (about 1e-7 relative) cannot decide the same way as double ones.
constexpr double kMassSlack = 1e-6;
struct Reference {
  Weights weights;
  std::set<int32_t> required;
  int32_t picked = -1;  // a token chosen without a draw
};

// The reference chain, written plainly: sort everything, cut, softmax in double.
Reference reference(const SamplingParams& p, const std::vector<float>& logits,
                    const std::vector<int32_t>& history) {
  std::vector<std::pair<float, int32_t>> c;
  for (size_t i = 0; i < logits.size(); ++i)
    c.push_back({std::isnan(logits[i]) ? -INFINITY : logits[i], int32_t(i)});
  const bool rep = p.repeat_penalty != 1.0f;
  if ((rep || p.presence_penalty != 0 || p.frequency_penalty != 0) && p.repeat_last_n != 0) {
    size_t n = history.size();
    if (p.repeat_last_n > 0) n = std::min(n, size_t(p.repeat_last_n));
    std::map<int32_t, int> counts;
    for (size_t i = history.size() - n; i < history.size(); ++i) ++counts[history[i]];
    for (auto& [logit, id] : c) {
      if (!counts.count(id)) continue;
      if (rep) logit = logit > 0 ? logit / p.repeat_penalty : logit * p.repeat_penalty;
      logit -= float(counts[id]) * p.frequency_penalty + p.presence_penalty;
    }
  }
  Reference r;
  if (p.temperature <= 0) {
    size_t best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if (c[i].first > c[best].first) best = i;
    r.picked = c[best].second;
    return r;
  }
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (!std::isfinite(c[0].first)) {
    r.picked = c[0].second;
    return r;
  }
  if (p.top_k > 0 && size_t(p.top_k) < c.size()) c.resize(size_t(p.top_k));
  size_t required = c.size();
  if (p.top_p < 1.0f && c.size() > 1) {
    std::vector<double> q(c.size());
    double sum = 0;
    for (size_t i = 0; i < c.size(); ++i) sum += q[i] = std::exp(double(c[i].first - c[0].first));
    // The smallest prefix whose mass reaches top_p, for top_p -/+ the slack.
    auto prefix = [&](double target) {
      double cum = 0;
      for (size_t i = 0; i < c.size(); ++i)
        if ((cum += q[i] / sum) >= target) return i + 1;
      return c.size();
    };
    required = prefix(p.top_p - kMassSlack);
    c.resize(prefix(p.top_p + kMassSlack));
  }
  if (p.min_p > 0) {
    const float threshold = c[0].first + std::log(p.min_p);
    size_t keep = 1;
    while (keep < c.size() && c[keep].first >= threshold) ++keep;
    c.resize(keep);
  }
  required = std::min(required, c.size());
  for (auto& x : c) x.first /= p.temperature;
  for (size_t i = 0; i < c.size(); ++i) {
    const double w = std::exp(double(c[i].first - c[0].first));
    if (w > 0) r.weights[c[i].second] = w;
    if (i < required) r.required.insert(c[i].second);
  }
  return r;
}

// The sampler's candidates: ids ascending, weights relative to the best (weight 0: never drawn).
struct Got {
  Weights weights;
  double total = 0;
  int32_t picked = -1;
};
Got sampler_distribution(const SamplingParams& p, const std::vector<float>& logits,
                         const std::vector<int32_t>& history) {
  Sampler s(p);
  const SamplingCandidates c = s.candidates(logits.data(), int32_t(logits.size()), history);
  Got g;
  g.picked = c.picked;
  float best = 0;
  for (float w : c.weights) best = std::max(best, w);
  for (size_t i = 0; i < c.ids.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(c.ids[i - 1], c.ids[i]) << "candidates are in ascending id order";
    }
    if (c.weights[i] > 0) g.weights[c.ids[i]] = double(c.weights[i]) / best;
  }
  g.total = c.total / best;
  return g;
}

// The same candidates with the same probabilities, to float exp's precision (the reference's is
// double). Below 1e-30 a weight is one the draw (53-bit uniforms) never reaches; float exp may
// round it to 0.
void expect_same(const Reference& want, const Got& got, const std::string& what) {
  ASSERT_EQ(want.picked, got.picked) << what;
  for (const auto& [id, w] : got.weights)
    ASSERT_TRUE(want.weights.count(id)) << what << ": token " << id << " is not a candidate";
  double want_total = 0;
  for (const auto& [id, w] : want.weights) {
    want_total += w;
    auto it = got.weights.find(id);
    if (it == got.weights.end()) {
      ASSERT_TRUE(w < 1e-30 || !want.required.count(id)) << what << ": token " << id << " missing";
      continue;
    }
    EXPECT_NEAR(it->second, w, 2e-6 * w + 1e-30) << what << ": token " << id;
  }
  // Where the set is certain, the normalised probabilities match too.
  if (want.required.size() == want.weights.size() && want.picked < 0) {
    EXPECT_NEAR(got.total, want_total, 2e-6 * want_total) << what;
  }
}

enum class Kind { kGaussian, kWide, kFlat, kTies, kSpecial };

std::vector<float> random_logits(std::mt19937_64& rng, int64_t n, Kind kind) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> level(0, 5);
  std::vector<float> l(size_t(n), 0.0f);
  for (float& x : l) {
    switch (kind) {
      case Kind::kGaussian:
        x = 3.0f * normal(rng);
        break;
      case Kind::kWide:
        x = 40.0f * normal(rng);
        break;
      case Kind::kFlat:
        x = 0.05f * normal(rng);
        break;  // nucleus of almost every token
      case Kind::kTies:
        x = 0.5f * float(level(rng));
        break;  // long runs of equal logits
      case Kind::kSpecial: {
        const int r = level(rng);
        x = r == 0 ? NAN : r == 1 ? -INFINITY : 2.0f * normal(rng);
        break;
      }
    }
  }
  return l;
}

std::string describe(const SamplingParams& p, int64_t n, int kind) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "V=%lld kind=%d temp=%g top_k=%d top_p=%g min_p=%g rep=%g pres=%g",
                (long long)n, kind, p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty,
                p.presence_penalty);
  return buf;
}

TEST(SamplerDistribution, MatchesFullSortReferenceOnRandomLogits) {
  std::mt19937_64 rng(2026);
  const int64_t sizes[] = {1, 2, 3, 17, 64, 65, 500, 1025, 4000, 32000};
  const float temps[] = {0.3f, 0.8f, 1.0f, 1.7f};
  const int64_t ks[] = {0, 1, 2, 7, 40, -1 /* V - 1 */, -2 /* V */, -3 /* V + 5 */};
  const float tps[] = {1.0f, 0.95f, 0.5f, 0.0f, 0.999f, 0.8f};
  const float mps[] = {0.0f, 0.05f, 0.3f, 1.0f, 1.5f};
  int cases = 0, ambiguous = 0;
  for (int64_t n : sizes) {
    for (int kind = 0; kind < 5; ++kind) {
      const int combos = n >= 4000 ? 12 : 60;
      for (int c = 0; c < combos; ++c) {
        const std::vector<float> logits = random_logits(rng, n, Kind(kind));
        SamplingParams p;
        p.seed = 1;
        p.temperature = temps[rng() % 4];
        const int64_t k = ks[rng() % 8];
        p.top_k = int32_t(k >= 0 ? k : k == -1 ? n - 1 : k == -2 ? n : n + 5);
        p.top_p = tps[rng() % 6];
        p.min_p = mps[rng() % 5];
        std::vector<int32_t> history;
        if (rng() % 3 == 0) {
          p.repeat_penalty = 1.3f;
          p.presence_penalty = 0.2f;
          p.frequency_penalty = 0.1f;
          p.repeat_last_n = rng() % 2 ? 64 : -1;
          for (int i = 0; i < 100; ++i) history.push_back(int32_t(rng() % uint64_t(n + 3)));
        }
        const Reference want = reference(p, logits, history);
        const std::string what = describe(p, n, kind);
        ++cases;
        ambiguous += want.required.size() != want.weights.size();
        expect_same(want, sampler_distribution(p, logits, history), what);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  // A boundary within float rounding of top_p is rare; most cases pin the set exactly.
  EXPECT_LT(ambiguous, cases / 20) << ambiguous << " of " << cases;
}

SamplingParams only(float temp) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 5;
  return p;
}

TEST(SamplerDistribution, EdgeCases) {
  std::mt19937_64 rng(7);
  const std::vector<float> l = random_logits(rng, 1000, Kind::kGaussian);
  auto check = [&](const SamplingParams& p, const std::vector<float>& logits, const char* what) {
    expect_same(reference(p, logits, {}), sampler_distribution(p, logits, {}), what);
  };
  SamplingParams p = only(1.0f);
  check(p, l, "every stage off");
  p.top_k = 5000;
  check(p, l, "k larger than V");
  p.top_k = 0;
  p.top_p = 1.0f;
  check(p, l, "p = 1");
  p.top_p = 0.0f;
  check(p, l, "p = 0 keeps the best");
  p.top_p = 1.0f;
  for (float mp : {1e-30f, 0.5f, 1.0f, 2.0f}) {
    p.min_p = mp;
    check(p, l, "min_p");
  }
  // Ties at the top-k boundary: the lower ids win, as in the sorted reference.
  p = only(1.0f);
  std::vector<float> ties(300, 1.0f);
  for (int i = 0; i < 300; i += 3) ties[size_t(i)] = 2.0f;
  for (int k : {1, 50, 100, 101, 150, 299}) {
    p.top_k = k;
    check(p, ties, "ties at top-k");
  }
  p.top_k = 0;
  p.min_p = 1.0f;  // keeps exactly the tied maxima
  check(p, ties, "min_p 1 on ties");
  // NaN and -inf: never candidates; only -inf/NaN: token 0 without a draw; +inf: the first.
  p = only(1.0f);
  check(p, {NAN, -INFINITY, 1.0f, NAN, 0.5f}, "NaN and -inf");
  p.top_k = 4;  // beyond the finite ones: the -inf tokens it keeps have probability 0
  check(p, {NAN, -INFINITY, 1.0f, NAN, 0.5f}, "top-k over -inf");
  EXPECT_EQ(sampler_distribution(p, {NAN, -INFINITY, NAN}, {}).picked, 0);
  EXPECT_EQ(sampler_distribution(p, {1.0f, INFINITY, 3.0f, INFINITY}, {}).picked, 1);
}

TEST(SamplerDistribution, NucleusFarLargerThanTheCutoffBuckets) {
  // A flat vocabulary: the 0.95 nucleus holds ~30k tokens, several refinement levels deep.
  std::mt19937_64 rng(11);
  for (int rep = 0; rep < 4; ++rep) {
    const std::vector<float> l = random_logits(rng, 128256, Kind::kFlat);
    SamplingParams p = only(0.8f);
    p.top_p = 0.95f;
    const Reference want = reference(p, l, {});
    EXPECT_GT(want.required.size(), 100000u);
    expect_same(want, sampler_distribution(p, l, {}), "flat 128k nucleus");
  }
}

TEST(SamplerDistribution, DrawFrequenciesFollowTheProbabilities) {
  SamplingParams p = only(0.8f);
  p.top_k = 6;
  p.top_p = 0.97f;
  const std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.5f, 0.7f, 1.9f, -3.0f, 0.0f, 1.0f};
  const Reference want = reference(p, l, {});
  ASSERT_EQ(want.required.size(), want.weights.size());
  double total = 0;
  for (const auto& [id, w] : want.weights) total += w;
  Sampler s(p);
  const int draws = 200000;
  std::map<int32_t, int> seen;
  for (int i = 0; i < draws; ++i) ++seen[s.sample(l.data(), int32_t(l.size()), {})];
  for (const auto& [id, count] : seen) EXPECT_TRUE(want.weights.count(id)) << "token " << id;
  for (const auto& [id, w] : want.weights) {
    const double prob = w / total;
    const double sd = std::sqrt(draws * prob * (1 - prob));
    EXPECT_NEAR(double(seen[id]), draws * prob, 5 * sd + 1) << "token " << id;
  }
}

TEST(SamplerDistribution, SameSeedSameTokens) {
  std::mt19937_64 rng(3);
  const std::vector<float> l = random_logits(rng, 32000, Kind::kGaussian);
  SamplingParams p;  // the defaults: every stage on
  p.temperature = 1.2f;
  p.repeat_penalty = 1.1f;
  p.seed = 99;
  auto run = [&] {
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 300; ++i) out.push_back(s.sample(l.data(), 32000, out));
    return out;
  };
  const auto a = run();
  EXPECT_EQ(a, run());
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 10u);
}

TEST(SamplerDistribution, TemperatureZeroIsGreedyArgmax) {
  std::mt19937_64 rng(5);
  for (int kind = 0; kind < 5; ++kind) {
    for (int rep = 0; rep < 20; ++rep) {
      const std::vector<float> l = random_logits(rng, 1 + int64_t(rng() % 5000), Kind(kind));
      Sampler s(only(0.0f));
      EXPECT_EQ(s.sample(l.data(), int32_t(l.size()), {}),
                greedy_argmax(l.data(), int64_t(l.size())));
    }
  }
  const std::vector<float> all_bad = {NAN, -INFINITY, NAN};
  EXPECT_EQ(Sampler(only(0.0f)).sample(all_bad.data(), 3, {}), greedy_argmax(all_bad.data(), 3));
}

}  // namespace
}  // namespace hearth
