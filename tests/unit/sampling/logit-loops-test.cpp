// The sampler's 16-lane O(V) passes (sampling/logit-loops.h) against plain scalar loops: every
// length's tail, NaN / -inf / +inf, floors landing on equal values, and the vector exp giving
// the scalar exp's bits (the band's weights and the whole set's must agree). Runs the clone the
// loader picks for this CPU (the ARM and sanitizer stages run the baseline).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "sampling/logit-loops.h"

namespace hearth::sampling {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits as a trained model's: a wide body, a few far above it, some -inf (masked tokens).
std::vector<float> logits(int64_t n, uint32_t seed, bool with_nan = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> body(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = body(rng);
  for (int64_t i = 0; i < n; i += 37) x[size_t(i)] = kNegInf;
  for (int64_t i = 5; i < n; i += 101) x[size_t(i)] += 12.0f;
  if (with_nan && n > 0) x[size_t(rng() % uint32_t(n))] = kNaN;
  return x;
}

const int64_t kLengths[] = {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200, 1000, 32000};

TEST(LogitLoops, MaxSkipsNanAndReportsIt) {
  for (int64_t n : kLengths) {
    for (bool with_nan : {false, true}) {
      const std::vector<float> x = logits(n, uint32_t(n) + 1, with_nan);
      float want = kNegInf;
      bool want_nan = false;
      for (float v : x) {
        want = v > want ? v : want;
        want_nan = want_nan || v != v;
      }
      bool has_nan = !want_nan;
      EXPECT_EQ(max_value(x.data(), n, &has_nan), want) << n;
      EXPECT_EQ(has_nan, want_nan) << n;
      // The NaN in the tail (past the last whole block) and in the first lane.
      if (n >= 17) {
        std::vector<float> y = logits(n, 3);
        y[size_t(n - 1)] = kNaN;
        EXPECT_TRUE((max_value(y.data(), n, &has_nan), has_nan)) << n;
        y[size_t(n - 1)] = 0;
        y[0] = kNaN;
        EXPECT_TRUE((max_value(y.data(), n, &has_nan), has_nan)) << n;
      }
    }
  }
  const std::vector<float> all_neg_inf(40, kNegInf);
  EXPECT_EQ(max_value(all_neg_inf.data(), 40), kNegInf);
  const std::vector<float> pos_inf = {1.0f, kInf, kNaN, 2.0f};
  EXPECT_EQ(max_value(pos_inf.data(), 4), kInf);
}

TEST(LogitLoops, CleanCopyReplacesNanAndFindsTheMax) {
  for (int64_t n : kLengths) {
    const std::vector<float> x = logits(n, uint32_t(n) + 7, true);
    std::vector<float> out(static_cast<size_t>(n), 1.0f);
    float want = kNegInf;
    for (float v : x) want = v > want ? v : want;
    EXPECT_EQ(copy_clean_max(x.data(), out.data(), n), want) << n;
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(out[size_t(i)]),
                std::bit_cast<uint32_t>(x[size_t(i)] == x[size_t(i)] ? x[size_t(i)] : kNegInf))
          << n << " at " << i;
  }
}

TEST(LogitLoops, MinFiniteSkipsNegativeInfinity) {
  for (int64_t n : kLengths) {
    std::vector<float> x = logits(n, uint32_t(n) + 11);
    float want = kInf;
    for (float v : x) want = v < want && v != kNegInf ? v : want;
    EXPECT_EQ(min_finite_value(x.data(), n), want) << n;
  }
  const std::vector<float> none(33, kNegInf);
  EXPECT_EQ(min_finite_value(none.data(), 33), kInf);
}

TEST(LogitLoops, ExpWeightsAreTheScalarExpsBitForBit) {
  for (float t : {1.0f, 0.8f, 1.7f}) {
    for (int64_t n : kLengths) {
      const std::vector<float> x = logits(n, uint32_t(n) + 13);
      const float m = max_value(x.data(), n);
      if (n == 0 || m == kNegInf) continue;
      std::vector<float> w(static_cast<size_t>(n));
      const double sum = exp_weights(x.data(), n, m, t, w.data());
      double want_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float want = exp_nonpositive(x[size_t(i)] / t - m / t);
        ASSERT_EQ(std::bit_cast<uint32_t>(w[size_t(i)]), std::bit_cast<uint32_t>(want))
            << "t " << t << " n " << n << " at " << i << ": " << x[size_t(i)];
        want_sum += double(want);
      }
      // The sum adds blocks in float before double (grouping): within float's rounding of a
      // few terms, far inside the sampler's 2e-6 bound.
      EXPECT_NEAR(sum, want_sum, 5e-7 * want_sum) << "t " << t << " n " << n;
      EXPECT_EQ(exp_sum(x.data(), n, m, t), sum) << "exp_sum is exp_weights' sum, bit for bit";
    }
  }
}

TEST(LogitLoops, ExpIsExpWithinItsBound) {
  for (float x = -87.0f; x <= 0.0f; x += 0.013f)
    EXPECT_NEAR(exp_nonpositive(x), std::exp(double(x)), 2e-7 * std::exp(double(x))) << x;
  EXPECT_EQ(exp_nonpositive(-88.0f), 0.0f);
  EXPECT_EQ(exp_nonpositive(kNegInf), 0.0f);
  EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);
}

TEST(LogitLoops, BandIsEveryElementAtOrAboveTheFloorInOrder) {
  for (int64_t n : kLengths) {
    std::vector<float> x = logits(n, uint32_t(n) + 17);
    if (n == 0) {
      double mass = -1;
      EXPECT_EQ(
          collect_band(x.data(), nullptr, 0, 0.0f, 0.0f, 1.0f, {nullptr, nullptr, nullptr}, &mass),
          0);
      EXPECT_EQ(mass, 0.0);
      continue;
    }
    const float m = max_value(x.data(), n);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t(3 * i + 1);
    // Floors: above everything, at the max, on an element's exact value, deep, below all.
    std::vector<float> floors = {m + 1.0f, m, m - 3.0f, m - 8.0f, -1e30f, kNegInf};
    floors.push_back(x[size_t(n / 2)] == kNegInf ? 0.0f : x[size_t(n / 2)]);
    for (float floor : floors) {
      for (bool weighted : {false, true}) {
        for (bool with_ids : {false, true}) {
          std::vector<float> lo(static_cast<size_t>(n)), w(static_cast<size_t>(n));
          std::vector<int32_t> id(static_cast<size_t>(n));
          double mass = -1;
          const int64_t kept =
              collect_band(x.data(), with_ids ? ids.data() : nullptr, n, floor, m, 0.9f,
                           {lo.data(), id.data(), weighted ? w.data() : nullptr}, &mass);
          int64_t k = 0;
          double want_mass = 0;
          for (int64_t i = 0; i < n; ++i) {
            if (!(x[size_t(i)] >= floor)) continue;
            ASSERT_LT(k, kept) << "floor " << floor << " n " << n;
            EXPECT_EQ(lo[size_t(k)], x[size_t(i)]);
            EXPECT_EQ(id[size_t(k)], with_ids ? ids[size_t(i)] : int32_t(i));
            if (weighted) {
              const float want = exp_nonpositive(x[size_t(i)] / 0.9f - m / 0.9f);
              EXPECT_EQ(std::bit_cast<uint32_t>(w[size_t(k)]), std::bit_cast<uint32_t>(want));
              want_mass += double(want);
            }
            ++k;
          }
          EXPECT_EQ(kept, k) << "floor " << floor << " n " << n;
          EXPECT_EQ(mass, want_mass) << "the mass adds the band's weights in order";
        }
      }
    }
  }
}

}  // namespace
}  // namespace hearth::sampling
