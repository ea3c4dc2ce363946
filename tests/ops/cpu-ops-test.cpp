// The CPU's small ops (attention, SwiGLU, RMSNorm, RoPE, adds) against float64 references, for
// every SmallOps table this machine runs (AVX-512 and portable) and through ops.h: odd head
// sizes, GQA, decode (T=1) and prefill (T=130), long contexts with key splits, poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/small-ops.h"
#include "kernels/ops.h"
#include "op-test-util.h"

namespace hearth::kernels {
namespace {

using namespace test;  // op-test-util.h

// Causal attention in double, straight from the definition.
std::vector<float> attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                                 const std::vector<float>& v, int64_t T, int64_t pos0, int64_t H,
                                 int64_t Hkv, int64_t hd, float scale) {
  std::vector<float> out(static_cast<size_t>(T * H * hd));
  const int64_t group = H / Hkv, stride = Hkv * hd;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t n_ctx = pos0 + t + 1, kvh = h / group;
      std::vector<double> s(static_cast<size_t>(n_ctx));
      double mx = -1e300;
      for (int64_t p = 0; p < n_ctx; ++p) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i)
          d += double(q[size_t((t * H + h) * hd + i)]) * k[size_t(p * stride + kvh * hd + i)];
        s[size_t(p)] = d * scale;
        mx = std::max(mx, s[size_t(p)]);
      }
      double l = 0;
      for (double& x : s) l += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t p = 0; p < n_ctx; ++p)
          o += s[size_t(p)] * v[size_t(p * stride + kvh * hd + i)];
        out[size_t((t * H + h) * hd + i)] = float(o / l);
      }
    }
  return out;
}

struct AttnCase {
  int64_t T, pos0, H, Hkv, hd;
  float scale_mul;  // > 1 makes the softmax peaky (large score gaps)
};

TEST(CpuOps, AttentionMatchesReference) {
  const AttnCase cases[] = {
      {1, 0, 4, 4, 64, 1},      // first decode step: one key
      {1, 255, 32, 4, 64, 1},   // TinyLlama decode at 256 context, GQA 8
      {1, 20, 10, 5, 64, 1},    // short decode context: kv heads cut 2/2/1 over 3 threads
      {1, 300, 6, 2, 7, 1},     // odd head size, GQA 3
      {130, 0, 8, 2, 64, 1},    // prefill T=130 (tails of query and key blocks)
      {130, 20, 6, 3, 33, 4},   // chunked prefill after 20 cached positions, odd hd, peaky
      {3, 5, 4, 1, 80, 1},      // multi-query
      {1, 3000, 2, 1, 128, 1},  // long context, few heads: key splits + merge
      {1, 2100, 4, 4, 96, 8},   // long context, peaky
      {17, 1000, 4, 2, 72, 1},  // speculative-style short batch at long context
  };
  ThreadPool pool1(1), pool3(3);
  for (const AttnCase& c : cases) {
    const int64_t n_ctx = c.pos0 + c.T, kvd = c.Hkv * c.hd;
    const auto q = random_vec(size_t(c.T * c.H * c.hd), 1);
    // The cache is sized beyond the context and its unused rows are NaN: reading past the
    // causal limit would poison the output.
    auto k = random_vec(size_t((n_ctx + 70) * kvd), 2);
    auto v = random_vec(size_t((n_ctx + 70) * kvd), 3);
    for (size_t i = size_t(n_ctx * kvd); i < k.size(); ++i) k[i] = v[i] = kNaN;
    const float scale = c.scale_mul / std::sqrt(float(c.hd));
    const auto want = attention_ref(q, k, v, c.T, c.pos0, c.H, c.Hkv, c.hd, scale);
    const std::string name = "T=" + std::to_string(c.T) + " pos0=" + std::to_string(c.pos0) +
                             " H=" + std::to_string(c.H) + "/" + std::to_string(c.Hkv) +
                             " hd=" + std::to_string(c.hd);
    for (const SmallOps* ops : tables())
      for (ThreadPool* pool : {&pool1, &pool3}) {
        auto out = poisoned(want.size());
        attention_with(*ops, q.data(), k.data(), v.data(), out.data(), c.T, c.pos0, c.H, c.Hkv,
                       c.hd, scale, AttentionMask{}, *pool);
        const std::string what =
            name + " " + ops->name + " threads=" + std::to_string(pool->size());
        expect_guard(out, want.size(), what);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(out[i], want[i], 2e-5) << what << " at " << i;
      }
    // ops.h's entry point (the active table).
    auto out = poisoned(want.size());
    attention(q.data(), k.data(), v.data(), out.data(), c.T, c.pos0, c.H, c.Hkv, c.hd, scale,
              pool3);
    expect_guard(out, want.size(), name);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << name;
  }
}

const int64_t kLengths[] = {0, 1, 15, 16, 17, 63, 1000, 5632, 70001};

TEST(CpuOps, SwigluMatchesReference) {
  ThreadPool pool(3);
  for (int64_t n : kLengths) {
    auto gate = random_vec(size_t(n), 4, -20.0f, 20.0f);
    const auto up = random_vec(size_t(n), 5, -3.0f, 3.0f);
    // Extremes: exp(-g) overflows for g << 0 and vanishes for g >> 0.
    const float extremes[] = {-100.0f, -88.0f, 0.0f, 88.0f, 100.0f, -1e-7f};
    for (size_t i = 0; i < std::size(extremes) && i < size_t(n); ++i)
      gate[i * 7 % size_t(n)] = extremes[i];
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[size_t(i)];
      want[size_t(i)] = float(g / (1.0 + std::exp(-g)) * up[size_t(i)]);
    }
    auto check = [&](const std::vector<float>& out, const std::string& what) {
      expect_guard(out, size_t(n), what);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(out[size_t(i)], want[size_t(i)], 1e-6 + 3e-6 * std::fabs(want[size_t(i)]))
            << what << " n=" << n << " at " << i << " gate " << gate[size_t(i)];
    };
    for (const SmallOps* ops : tables()) {
      auto out = poisoned(size_t(n));
      ops->swiglu(gate.data(), up.data(), out.data(), n);
      check(out, ops->name);
    }
    auto out = poisoned(size_t(n));
    swiglu(gate.data(), up.data(), out.data(), n, pool);
    check(out, "pooled");
    // In place, as the forward pass calls it (out = gate).
    auto inplace = gate;
    inplace.resize(size_t(n) + kGuard, kGuardValue);
    swiglu(inplace.data(), up.data(), inplace.data(), n, pool);
    check(inplace, "in place");
  }
}

TEST(CpuOps, RmsnormMatchesReference) {
  ThreadPool pool(3);
  for (int64_t rows : {1, 3, 130})
    for (int64_t n : {1, 17, 64, 2048}) {
      const auto x = random_vec(size_t(rows * n), 6, -4.0f, 4.0f);
      const auto w = random_vec(size_t(n), 7, 0.5f, 1.5f);
      std::vector<float> want(static_cast<size_t>(rows * n));
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
        const double s = 1.0 / std::sqrt(ss / double(n) + 1e-5);
        for (int64_t i = 0; i < n; ++i)
          want[size_t(r * n + i)] = float(x[size_t(r * n + i)] * s * w[size_t(i)]);
      }
      auto check = [&](const std::vector<float>& out, const std::string& what) {
        expect_guard(out, want.size(), what);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(out[i], want[i], 1e-6 * (1 + std::fabs(want[i])))
              << what << " rows=" << rows << " n=" << n << " at " << i;
      };
      for (const SmallOps* ops : tables()) {
        auto out = poisoned(want.size());
        for (int64_t r = 0; r < rows; ++r) {
          const double ss = ops->sum_squares(x.data() + r * n, n);
          const float s = float(1.0 / std::sqrt(ss / double(n) + 1e-5));
          ops->scale_mul(x.data() + r * n, s, w.data(), out.data() + r * n, n);
        }
        check(out, ops->name);
      }
      auto out = poisoned(want.size());
      rmsnorm(x.data(), w.data(), out.data(), rows, n, 1e-5f, pool);
      check(out, "pooled");
      out = poisoned(want.size());
      rmsnorm(x.data(), w.data(), out.data(), rows, n, 1e-5f);
      check(out, "ops.h");
    }
}

TEST(CpuOps, RopeMatchesReferenceAndNeverReusesStaleAngles) {
  ThreadPool pool(3);
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalves})
    for (int64_t hd : {6, 64, 128})
      for (int64_t T : {1, 130}) {
        const int64_t H = 32, half = hd / 2;
        std::vector<float> inv(static_cast<size_t>(half));
        for (int64_t i = 0; i < half; ++i)
          inv[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(hd)));
        std::vector<int32_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(4000 + 3 * t);
        const auto x0 = random_vec(size_t(T * H * hd), 8);
        auto ref = [&] {
          std::vector<float> y = x0;
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t i = 0; i < half; ++i) {
                const double a = double(pos[size_t(t)]) * double(inv[size_t(i)]);
                float* v = y.data() + (t * H + h) * hd;
                const int64_t ia = style == RopeStyle::kInterleaved ? 2 * i : i;
                const int64_t ib = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
                const double x0v = v[ia], x1v = v[ib];
                v[ia] = float(x0v * std::cos(a) - x1v * std::sin(a));
                v[ib] = float(x0v * std::sin(a) + x1v * std::cos(a));
              }
          return y;
        };
        const std::string what = "hd=" + std::to_string(hd) + " T=" + std::to_string(T);
        auto check = [&](const std::vector<float>& y, const std::vector<float>& want) {
          expect_guard(y, want.size(), what);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(y[i], want[i], 2e-6) << what << " at " << i;
        };
        auto run = [&](bool pooled) {
          std::vector<float> y = x0;
          y.resize(x0.size() + kGuard, kGuardValue);
          if (pooled)
            rope(y.data(), T, H, hd, pos.data(), inv.data(), style, pool);
          else
            rope(y.data(), T, H, hd, pos.data(), inv.data(), style);
          return y;
        };
        check(run(false), ref());
        check(run(true), ref());
        // Same buffers, new contents (the forward pass reuses its arrays): no stale angles.
        for (auto& p : pos) p += 1;
        check(run(true), ref());
        inv[size_t(half - 1)] *= 0.5f;
        check(run(false), ref());
      }
}

TEST(CpuOps, AddsAreExact) {
  ThreadPool pool(3);
  for (int64_t n : kLengths) {
    const auto x = random_vec(size_t(n), 9);
    const auto y0 = random_vec(size_t(n), 10);
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[size_t(i)] = y0[size_t(i)] + x[size_t(i)];
    auto fresh = [&] {
      auto y = y0;
      y.resize(size_t(n) + kGuard, kGuardValue);
      return y;
    };
    for (const SmallOps* ops : tables()) {
      auto y = fresh();
      ops->add(y.data(), x.data(), n);
      expect_guard(y, size_t(n), ops->name);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[size_t(i)], want[size_t(i)]) << ops->name;
    }
    auto y = fresh();
    add_inplace(y.data(), x.data(), n, pool);
    expect_guard(y, size_t(n), "pooled");
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[size_t(i)], want[size_t(i)]) << "pooled " << n;
  }
  // Bias rows.
  const int64_t rows = 5, n = 33;
  const auto b = random_vec(size_t(n), 11);
  auto y = random_vec(size_t(rows * n), 12);
  const auto y0 = y;
  y.resize(size_t(rows * n) + kGuard, kGuardValue);
  add_bias(y.data(), b.data(), rows, n);
  expect_guard(y, size_t(rows * n), "bias");
  for (int64_t i = 0; i < rows * n; ++i) ASSERT_EQ(y[size_t(i)], y0[size_t(i)] + b[size_t(i % n)]);
}

// The softmax-exponential loop at the edges of its range, every table against std::exp (within
// 1e-37: a table may flush results that would be denormal to 0).
TEST(CpuOps, ExpSumAccurateOverRange) {
  std::vector<float> s;
  for (float x = -110.0f; x <= 0.0f; x += 0.37f) s.push_back(x);
  for (const SmallOps* ops : tables()) {
    auto e = s;
    const float sum = ops->exp_sum(e.data(), int64_t(e.size()), 0.0f);
    double want_sum = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      const double want = std::exp(double(s[i]));
      want_sum += want;
      ASSERT_NEAR(e[i], want, 1e-37 + 4e-7 * want) << ops->name << " x=" << s[i];
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << ops->name;
  }
}

// The greedy pick against the plain loop it replaced: the first of equal maxima, NaN never picked,
// 0 when nothing is above -inf; lengths around the lane width (tails), maxima in the lanes and in
// the tail, ties across lanes (the smaller index must win whichever lane holds it). On x86 this
// runs the clone the CPU picks; CI's qemu runs cover the others.
TEST(CpuOps, ArgmaxIsTheFirstLargestIgnoringNan) {
  const auto reference = [](const std::vector<float>& x) {
    int32_t best = 0;
    float best_v = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] > best_v) best_v = x[i], best = int32_t(i);
    return best;
  };
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> coarse(-3, 3);  // few distinct values: many ties
  std::normal_distribution<float> fine(0.0f, 2.0f);
  for (int64_t n : {0, 1, 2, 15, 16, 17, 31, 33, 100, 255, 256, 257, 1000, 32000, 32011}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = trial % 2 ? float(coarse(rng)) : fine(rng);
      if (n > 0 && trial % 5 == 1) x[rng() % x.size()] = kNan;
      if (n > 0 && trial % 5 == 2) x[rng() % x.size()] = kInf;
      if (n > 3 && trial % 5 == 3) x[x.size() - 1 - rng() % 3] = 1e9f;  // in the tail
      if (trial == 5)  // rising to the end: the last entry, in the tail for most n
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
      if (trial == 4) std::fill(x.begin(), x.end(), kNan);
      if (trial == 6) std::fill(x.begin(), x.end(), -kInf);
      if (trial == 8 && n > 50) {  // the maximum twice, the later one in a lower lane and block
        x[17] = 50.0f;
        x[size_t(n / 16 * 16 - 16)] = 50.0f;
      }
      ASSERT_EQ(argmax(x.data(), n), reference(x)) << "n=" << n << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace hearth::kernels
