// The ops the 2025-26 families add, on every SmallOps table this machine runs and through ops.h,
// against the float64 references in kernels/ref/ops-ref.h: attention with a sliding window, a
// soft-cap and a ring cache (decode, prefill, key splits, wrap inside a pass), partial / scaled
// RoPE, attention sinks (gpt-oss: one logit per head in the denominator, also across key splits),
// GELU-tanh gated FFN, gpt-oss's clamped SwiGLU, soft-capped logits, per-head RMSNorm in place.
// Outputs are poisoned and guarded; cache rows no query may see are NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/small-ops.h"
#include "kernels/ops.h"
#include "kernels/ref/ops-ref.h"
#include "op-test-util.h"

namespace hearth::kernels {
namespace {

using namespace test;  // op-test-util.h

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  expect_guard(got, want.size(), what);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " at " << i;
}

struct MaskCase {
  int64_t T, pos0, H, Hkv, hd;
  AttentionMask mask;
  float scale_mul;
  // Attention sinks: none, or one logit per head drawn from [-2, 2] + sink_shift (a large
  // shift makes the sink the row's maximum, which the normalisation must survive).
  bool sinks = false;
  float sink_shift = 0;
};

TEST(FamilyOps, MaskedAttentionMatchesReference) {
  const MaskCase cases[] = {
      {1, 40, 4, 2, 32, {.window = 8}, 1},                      // decode past the window
      {24, 0, 4, 2, 32, {.window = 8, .softcap = 50}, 4},       // Gemma 2 prefill, peaky scores
      {1, 3000, 2, 1, 64, {.window = 1024}, 1},                 // key splits inside the window
      {130, 20, 6, 3, 33, {.window = 17}, 1},                   // odd sizes, query blocks
      {1, 300, 4, 4, 16, {.softcap = 5}, 8},                    // soft-cap alone, strong capping
      {12, 30, 4, 2, 32, {.window = 8, .ring_rows = 20}, 1},    // ring: the pass wraps its rows
      {1, 1000, 8, 2, 64, {.window = 64, .ring_rows = 70}, 1},  // decode in a ring
      {64, 500, 4, 1, 48, {.window = 100, .ring_rows = 164}, 1},
      // gpt-oss: sinks with and without a window, in decode, prefill and split-key runs.
      {1, 40, 4, 2, 16, {.window = 8}, 1, true},                    // decode past the window
      {24, 0, 4, 2, 16, {.window = 8, .ring_rows = 520}, 1, true},  // prefill, sliding
      {24, 0, 4, 2, 16, {}, 1, true, 20},                           // the sink dominates
      {1, 3000, 2, 1, 64, {}, 1, true},                             // decode key ranges, merged
      {40, 1000, 2, 1, 64, {}, 1, true, 3},                         // prefill key splits, merged
      {1, 1000, 8, 2, 64, {.window = 64, .ring_rows = 70}, 1, true, -30},  // negligible sink
  };
  ThreadPool pool1(1), pool3(3);
  for (const MaskCase& c : cases) {
    const int64_t n_ctx = c.pos0 + c.T, kvd = c.Hkv * c.hd;
    const int64_t rows = c.mask.ring_rows > 0 ? c.mask.ring_rows : n_ctx + 70;
    const auto q = random_vec(size_t(c.T * c.H * c.hd), 1);
    auto k = random_vec(size_t(rows * kvd), 2);
    auto v = random_vec(size_t(rows * kvd), 3);
    // Rows no query of the call may see are NaN: before the window, past causality.
    const int64_t first_seen =
        c.mask.window > 0 ? std::max<int64_t>(0, c.pos0 + 1 - c.mask.window) : 0;
    for (int64_t r = 0; r < rows; ++r) {
      bool seen = false;
      for (int64_t p = first_seen; p < n_ctx && !seen; ++p)
        seen = (c.mask.ring_rows > 0 ? p % c.mask.ring_rows : p) == r;
      if (!seen)
        for (int64_t i = 0; i < kvd; ++i) k[size_t(r * kvd + i)] = v[size_t(r * kvd + i)] = kNaN;
    }
    const float scale = c.scale_mul / std::sqrt(float(c.hd));
    auto sinks = random_vec(size_t(c.H), 9, -2.0f, 2.0f);
    for (float& x : sinks) x += c.sink_shift;
    AttentionMask mask = c.mask;
    if (c.sinks) mask.sinks = sinks.data();
    const auto want =
        ref::attention(q.data(), k.data(), v.data(), c.T, c.pos0, c.H, c.Hkv, c.hd, scale, mask);
    const std::string name = "T=" + std::to_string(c.T) + " pos0=" + std::to_string(c.pos0) +
                             " window=" + std::to_string(c.mask.window) +
                             " cap=" + std::to_string(c.mask.softcap) +
                             " ring=" + std::to_string(c.mask.ring_rows) +
                             (c.sinks ? " sinks+" + std::to_string(c.sink_shift) : "");
    for (const SmallOps* ops : tables())
      for (ThreadPool* pool : {&pool1, &pool3}) {
        auto out = poisoned(want.size());
        attention_with(*ops, q.data(), k.data(), v.data(), out.data(), c.T, c.pos0, c.H, c.Hkv,
                       c.hd, scale, mask, *pool);
        expect_close(out, want, 2e-5, name + " " + ops->name);
      }
    auto out = poisoned(want.size());
    attention(q.data(), k.data(), v.data(), out.data(), c.T, c.pos0, c.H, c.Hkv, c.hd, scale, mask,
              pool3);
    expect_close(out, want, 2e-5, name + " ops.h");
  }
}

TEST(FamilyOps, PartialAndScaledRopeMatchesReference) {
  ThreadPool pool(3);
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalves})
    for (auto [hd, n_rot] : {std::pair<int64_t, int64_t>{128, 96}, {64, 64}, {32, 8}})
      for (int64_t T : {1, 130})
        for (float mscale : {1.0f, 1.1386f}) {
          const int64_t H = 8;
          std::vector<float> inv(static_cast<size_t>(n_rot / 2));
          for (size_t i = 0; i < inv.size(); ++i)
            inv[i] = float(std::pow(10000.0, -2.0 * double(i) / double(n_rot)));
          std::vector<int32_t> pos(static_cast<size_t>(T));
          for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(4000 + 3 * t);
          const auto x = random_vec(size_t(T * H * hd), 8);
          const auto want =
              ref::rope_partial(x.data(), T, H, hd, n_rot, pos.data(), inv.data(), style, mscale);
          const std::string what = "hd=" + std::to_string(hd) + " n_rot=" + std::to_string(n_rot) +
                                   " T=" + std::to_string(T) + " mscale=" + std::to_string(mscale);
          for (bool pooled : {false, true}) {
            auto y = x;
            y.resize(x.size() + kGuard, kGuardValue);
            if (pooled)
              rope_partial(y.data(), T, H, hd, n_rot, pos.data(), inv.data(), style, mscale, pool);
            else
              rope_partial(y.data(), T, H, hd, n_rot, pos.data(), inv.data(), style, mscale);
            expect_close(y, want, 2e-6, what);
            // The dims past n_rot pass through untouched (bit for bit).
            for (int64_t r = 0; r < T * H; ++r)
              for (int64_t i = n_rot; i < hd; ++i)
                ASSERT_EQ(y[size_t(r * hd + i)], x[size_t(r * hd + i)]) << what;
          }
        }
}

TEST(FamilyOps, GeluTanhGatedMatchesReference) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 17, 1000, 70001}) {
    auto gate = random_vec(size_t(n), 4, -12.0f, 12.0f);
    const auto up = random_vec(size_t(n), 5, -3.0f, 3.0f);
    const float extremes[] = {-100.0f, -10.0f, 0.0f, 10.0f, 100.0f, -1e-7f};
    for (size_t i = 0; i < std::size(extremes) && i < size_t(n); ++i)
      gate[i * 7 % size_t(n)] = extremes[i];
    const auto want = ref::gelu_tanh_gated(gate.data(), up.data(), n);
    auto out = poisoned(size_t(n));
    gelu_tanh_gated(gate.data(), up.data(), out.data(), n);
    expect_close(out, want, 2e-6, "ops.h n=" + std::to_string(n));
    auto inplace = gate;  // out = gate, as the forward pass calls it
    inplace.resize(size_t(n) + kGuard, kGuardValue);
    gelu_tanh_gated(inplace.data(), up.data(), inplace.data(), n, pool);
    expect_close(inplace, want, 2e-6, "pooled in place n=" + std::to_string(n));
  }
}

// gpt-oss's experts: both clamps (gate above the limit, up beyond +-limit) and the sigmoid's
// tails, pooled (in place, as the forward pass calls it) and not.
TEST(FamilyOps, ClampedSwigluMatchesReference) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 17, 1000, 70001}) {
    auto gate = random_vec(size_t(n), 10, -12.0f, 12.0f);
    auto up = random_vec(size_t(n), 11, -12.0f, 12.0f);
    const float extremes[] = {-100.0f, -7.0f, 0.0f, 7.0f, 7.5f, 100.0f};
    for (size_t i = 0; i < std::size(extremes) && i < size_t(n); ++i)
      gate[i * 5 % size_t(n)] = up[i * 3 % size_t(n)] = extremes[i];
    const auto want = ref::swiglu_clamped(gate.data(), up.data(), n, 1.702, 7.0);
    auto out = poisoned(size_t(n));
    swiglu_clamped(gate.data(), up.data(), out.data(), n, 1.702f, 7.0f);
    expect_close(out, want, 2e-6, "ops.h n=" + std::to_string(n));
    auto inplace = gate;
    inplace.resize(size_t(n) + kGuard, kGuardValue);
    swiglu_clamped(inplace.data(), up.data(), inplace.data(), n, 1.702f, 7.0f, pool);
    expect_close(inplace, want, 2e-6, "pooled in place n=" + std::to_string(n));
  }
  // The clamps by value: gate 100 counts as 7, up 100 as 7 and -100 as -7.
  const float g[] = {100.0f, 1.0f, 1.0f}, u[] = {0.0f, 100.0f, -100.0f};
  float o[3];
  swiglu_clamped(g, u, o, 3, 1.702f, 7.0f);
  EXPECT_NEAR(o[0], 7.0 / (1.0 + std::exp(-1.702 * 7.0)), 1e-5);
  EXPECT_NEAR(o[1], 8.0 / (1.0 + std::exp(-1.702)), 1e-5);
  EXPECT_NEAR(o[2], -6.0 / (1.0 + std::exp(-1.702)), 1e-5);
}

TEST(FamilyOps, SoftcapAndScaleMatchReference) {
  auto x = random_vec(1000, 6, -200.0f, 200.0f);
  x[0] = 1e30f;
  x[1] = -1e30f;
  const auto want = ref::softcap(x.data(), int64_t(x.size()), 30.0);
  auto y = x;
  y.resize(x.size() + kGuard, kGuardValue);
  softcap(y.data(), int64_t(x.size()), 30.0f);
  expect_close(y, want, 1e-6, "softcap");
  EXPECT_FLOAT_EQ(y[0], 30.0f);
  auto z = x;
  z.resize(x.size() + kGuard, kGuardValue);
  scale(z.data(), int64_t(x.size()), 11.3137085f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(z[i], x[i] * 11.3137085f);
  for (size_t i = x.size(); i < z.size(); ++i) ASSERT_EQ(z[i], kGuardValue);
}

// Qwen3 / Gemma 3 normalise each head of q and k: rows = tokens x heads of head_dim, in place.
TEST(FamilyOps, PerHeadRmsnormInPlaceMatchesReference) {
  ThreadPool pool(3);
  for (auto [rows, hd] : {std::pair<int64_t, int64_t>{4, 48}, {130 * 16, 128}, {3, 17}}) {
    const auto x = random_vec(size_t(rows * hd), 7, -4.0f, 4.0f);
    const auto w = random_vec(size_t(hd), 8, 0.5f, 1.5f);
    const auto want = ref::rmsnorm(x.data(), w.data(), rows, hd, 1e-6);
    auto y = x;
    y.resize(x.size() + kGuard, kGuardValue);
    rmsnorm(y.data(), w.data(), y.data(), rows, hd, 1e-6f, pool);
    expect_close(y, want, 1e-6, "rows=" + std::to_string(rows) + " hd=" + std::to_string(hd));
  }
}

}  // namespace
}  // namespace hearth::kernels
