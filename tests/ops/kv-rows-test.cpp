// Attention over typed KV cache rows (f16, bf16, q8_0; ops.h KvRows) on every SmallOps table
// this machine runs: the inner loops (scores, accumulate) against float64 over odd key counts
// and head sizes, and whole attention calls (decode, prefill, GQA, key splits, sliding window,
// soft-cap, ring rows, K and V of different types) against the float64 reference over the rows
// the kernels read, dequantized, and unchanged by a read-ahead of other rows; and a decode step's
// sequences in one pass against each alone. Rows no query may see hold poison; outputs are
// guarded.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/small-ops.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "kernels/ref/ops-ref.h"
#include "op-test-util.h"

namespace hearth::kernels {
namespace {

using namespace test;  // op-test-util.h

constexpr DType kTypedKinds[] = {DType::F16, DType::BF16, DType::Q8_0};

// rows [n, dim] f32 -> typed bytes, and those bytes read back as f32 (what the kernels see).
struct TypedRows {
  std::vector<uint8_t> bytes;
  std::vector<float> seen;
};
TypedRows make_rows(DType t, const std::vector<float>& x, int64_t n, int64_t dim) {
  TypedRows r;
  r.bytes.resize(size_t(n * kv_row_bytes(t, dim)) + 64);  // + a tail no kernel may need
  store_kv_rows(t, x.data(), r.bytes.data(), n, dim);
  r.seen.resize(size_t(n * dim));
  for (int64_t i = 0; i < n; ++i)
    load_kv_row(t, r.bytes.data() + i * kv_row_bytes(t, dim), r.seen.data() + i * dim, dim);
  return r;
}

const KvRowOps& row_ops(const SmallOps& ops, DType t) {
  return t == DType::F16 ? ops.f16 : t == DType::BF16 ? ops.bf16 : ops.q8_0;
}

// Every table's row store (where it has one) writes the reference quantizer's bits, over the
// values where a conversion instruction could differ: ties between two f16 values, subnormals,
// overflow to inf, inf, NaNs of both signs and payloads, and a tail shorter than a vector.
TEST(KvRows, TableStoresWriteTheReferenceBits) {
  std::vector<float> x = random_vec(301, 5, -70000, 70000);
  const float special[] = {1.0f + 1.0f / 2048,  // a tie: halfway between two f16 values
                           1.0f + 3.0f / 2048,  // a tie that rounds up (odd)
                           65519.f,             // largest that rounds to 65504
                           65520.f,             // overflows to inf
                           -1e-7f,              // subnormal f16
                           3e-8f,               // rounds to zero or the smallest subnormal
                           5.9604645e-8f,       // smallest f16 subnormal exactly
                           INFINITY,
                           -INFINITY,
                           NAN,
                           -NAN,
                           std::bit_cast<float>(0x7f800001u),  // signalling NaN, payload 1
                           std::bit_cast<float>(0xffbfffffu),
                           0.0f,
                           -0.0f};
  for (size_t i = 0; i < std::size(special); ++i) x[i * 19] = special[i];
  int count = 0;
  const SmallOps* const* tables = supported_small_ops(&count);
  for (int k = 0; k < count; ++k) {
    const SmallOps& ops = *tables[k];
    for (DType t : kTypedKinds) {
      const KvRowOps& rows = row_ops(ops, t);
      if (!rows.store) continue;
      for (int64_t n : {int64_t(301), int64_t(16), int64_t(7)}) {
        const int64_t bytes = kv_row_bytes(t, n);
        if (t == DType::Q8_0 && n % 32 != 0) continue;
        std::vector<uint8_t> got(size_t(bytes) + 16, 0xA5);
        std::vector<uint8_t> want(static_cast<size_t>(bytes));
        rows.store(x.data(), got.data(), n);
        ASSERT_TRUE(quantize_row(t, x.data(), want.data(), n).is_ok());
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin()))
            << ops.name << " " << dtype_name(t) << " n=" << n;
        for (int g = 0; g < 16; ++g) ASSERT_EQ(got[size_t(bytes + g)], 0xA5) << "store overran";
      }
    }
  }
}

TEST(KvRows, StoreRoundsAsTheQuantizers) {
  const int64_t n = 3, dim = 96;
  const auto x = random_vec(size_t(n * dim), 11, -3, 3);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    std::vector<uint8_t> got(size_t(n * kv_row_bytes(t, dim))), want(got.size());
    store_kv_rows(t, x.data(), got.data(), n, dim);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(
          quantize_row(t, x.data() + i * dim, want.data() + i * kv_row_bytes(t, dim), dim).is_ok());
    EXPECT_EQ(got, want) << dtype_name(t);
  }
  EXPECT_EQ(kv_row_bytes(DType::Q8_0, 64), 68);
  EXPECT_EQ(kv_row_bytes(DType::BF16, 6), 12);
  EXPECT_TRUE(is_kv_type(DType::BF16));
  EXPECT_FALSE(is_kv_type(DType::Q4_0));
}

// scores and accumulate of every table against float64 over the dequantized rows: head sizes
// of whole vectors and not (f16/bf16), key counts around the 16-key groups, a rescale c.
TEST(KvRows, InnerLoopsMatchFloat64) {
  for (const SmallOps* ops : tables())
    for (DType t : kTypedKinds)
      for (int64_t hd : {32, 64, 96, 128, 160, 256, 512, 24, 40, 8}) {
        if (t == DType::Q8_0 && hd % 32 != 0) continue;
        for (int64_t nk : {1, 7, 16, 33}) {
          const int64_t stride = kv_row_bytes(t, hd) + (t == DType::Q8_0 ? 34 : 6);  // padded
          const auto x = random_vec(size_t(nk * hd), uint32_t(hd + nk), -2, 2);
          std::vector<uint8_t> rows(size_t(nk * stride) + 64);
          std::vector<float> seen(size_t(nk * hd));
          for (int64_t j = 0; j < nk; ++j) {
            store_kv_rows(t, x.data() + j * hd, rows.data() + j * stride, 1, hd);
            load_kv_row(t, rows.data() + j * stride, seen.data() + j * hd, hd);
          }
          const auto q = random_vec(size_t(hd), 5);
          const std::string what = std::string(ops->name) + " " + dtype_name(t) +
                                   " hd=" + std::to_string(hd) + " nk=" + std::to_string(nk);
          auto s = poisoned(size_t(nk));
          row_ops(*ops, t).scores(q.data(), rows.data(), stride, nk, hd, 0.125f, s.data());
          expect_guard(s, size_t(nk), what);
          for (int64_t j = 0; j < nk; ++j) {
            double d = 0, mag = 0;
            for (int64_t i = 0; i < hd; ++i) {
              d += double(q[size_t(i)]) * seen[size_t(j * hd + i)];
              mag += std::fabs(double(q[size_t(i)]) * seen[size_t(j * hd + i)]);
            }
            ASSERT_NEAR(s[size_t(j)], 0.125 * d, 2e-6 * (1 + mag)) << what << " key " << j;
          }
          const auto p = random_vec(size_t(nk), 6, 0, 1);
          const auto acc0 = random_vec(size_t(hd), 7);
          auto acc = acc0;
          acc.resize(size_t(hd) + kGuard, kGuardValue);
          row_ops(*ops, t).accumulate(acc.data(), 0.75f, p.data(), rows.data(), stride, nk, hd);
          expect_guard(acc, size_t(hd), what);
          for (int64_t i = 0; i < hd; ++i) {
            double want = 0.75 * acc0[size_t(i)], mag = std::fabs(want);
            for (int64_t j = 0; j < nk; ++j) {
              want += double(p[size_t(j)]) * seen[size_t(j * hd + i)];
              mag += std::fabs(double(p[size_t(j)]) * seen[size_t(j * hd + i)]);
            }
            ASSERT_NEAR(acc[size_t(i)], want, 2e-6 * (1 + mag)) << what << " column " << i;
          }
        }
      }
}

// The group loops (grouped-query attention: g query heads read each row once) against the
// per-head loops of the same table: scores the same bits (the same order of products per head),
// P.V within rounding; group sizes around the loops' head chunks, head sizes around their
// column passes, key counts around the 16-key groups.
TEST(KvRows, GroupLoopsMatchPerHeadLoops) {
  int tested = 0;
  const auto all = tables();
  for (const SmallOps* ops : all)
    for (DType t : kTypedKinds) {
      const KvRowOps& rows = row_ops(*ops, t);
      if (!rows.scores_group || !rows.accumulate_group) continue;
      for (int64_t hd : {32, 64, 96, 128, 256, 512, 80, 24})
        for (int64_t g : {2, 3, 4, 5, 8, 9}) {
          if (t == DType::Q8_0 && hd % 32 != 0) continue;
          ++tested;
          const int64_t nk = 37, stride = kv_row_bytes(t, hd) + 34, s_stride = 40;
          const auto x = random_vec(size_t(nk * hd), uint32_t(hd + g), -2, 2);
          std::vector<uint8_t> kv(size_t(nk * stride) + 64);
          for (int64_t j = 0; j < nk; ++j)
            store_kv_rows(t, x.data() + j * hd, kv.data() + j * stride, 1, hd);
          const auto q = random_vec(size_t(g * hd), 5);
          const std::string what = std::string(ops->name) + " " + dtype_name(t) +
                                   " hd=" + std::to_string(hd) + " g=" + std::to_string(g);
          auto s = poisoned(size_t(g * s_stride));
          rows.scores_group(q.data(), g, kv.data(), stride, nk, hd, 0.125f, s.data(), s_stride);
          for (int64_t h = 0; h < g; ++h) {
            std::vector<float> one(static_cast<size_t>(nk));
            rows.scores(q.data() + h * hd, kv.data(), stride, nk, hd, 0.125f, one.data());
            for (int64_t j = 0; j < nk; ++j)
              ASSERT_EQ(s[size_t(h * s_stride + j)], one[size_t(j)]) << what << " head " << h;
          }
          const auto p = random_vec(size_t(g * s_stride), 6, 0, 1);
          const auto c = random_vec(size_t(g), 8, 0, 1);
          const auto acc0 = random_vec(size_t(g * hd), 7);
          auto acc = acc0;
          acc.resize(size_t(g * hd) + kGuard, kGuardValue);
          rows.accumulate_group(acc.data(), c.data(), p.data(), s_stride, g, kv.data(), stride, nk,
                                hd);
          expect_guard(acc, size_t(g * hd), what);
          std::vector<float> one(static_cast<size_t>(hd));
          for (int64_t h = 0; h < g; ++h) {
            for (int64_t i = 0; i < hd; ++i) one[size_t(i)] = acc0[size_t(h * hd + i)];
            rows.accumulate(one.data(), c[size_t(h)], p.data() + h * s_stride, kv.data(), stride,
                            nk, hd);
            for (int64_t i = 0; i < hd; ++i)
              ASSERT_NEAR(acc[size_t(h * hd + i)], one[size_t(i)],
                          2e-6 * (1 + std::fabs(one[size_t(i)])))
                  << what << " head " << h << " column " << i;
          }
        }
    }
  if (tested == 0) GTEST_SKIP() << "no table on this CPU has group loops (AVX-512 and AVX2 have)";
  std::printf("group loops tested: %d (table, type, head size, group) cases\n", tested);
}

struct Case {
  int64_t T, pos0, H, Hkv, hd;
  AttentionMask mask;
};

// Whole attention calls over typed K and V (each type with itself, and mixed pairs) against
// ref::attention over the values the rows hold.
TEST(KvRows, AttentionOverTypedRowsMatchesReference) {
  const Case cases[] = {
      {1, 0, 4, 2, 64, {}},                                    // the first token
      {1, 700, 8, 2, 64, {}},                                  // decode: key ranges per thread
      {1, 3000, 2, 1, 128, {}},                                // a long context's key splits
      {37, 20, 6, 3, 32, {}},                                  // prefill, query blocks, GQA
      {24, 0, 4, 2, 64, {.window = 8, .softcap = 50}},         // Gemma 2: window + soft-cap
      {12, 30, 4, 2, 32, {.window = 8, .ring_rows = 20}},      // a ring the pass wraps
      {1, 1000, 8, 2, 64, {.window = 64, .ring_rows = 70}},    // decode in a ring
      {64, 500, 4, 1, 96, {.window = 100, .ring_rows = 164}},  // prefill in a ring, hd 96
  };
  const std::pair<DType, DType> pairs[] = {
      {DType::F16, DType::F16},  {DType::BF16, DType::BF16}, {DType::Q8_0, DType::Q8_0},
      {DType::Q8_0, DType::F16}, {DType::F32, DType::BF16},  {DType::F16, DType::Q8_0},
  };
  const bool sanitized = std::getenv("HEARTH_SANITIZED") != nullptr;
  ThreadPool pool1(1), pool3(3);
  for (Case c : cases) {
    // Under ASan the long contexts shrink (still several key splits and a wrapped ring).
    if (sanitized) c.pos0 = std::min<int64_t>(c.pos0, 600);
    const int64_t n_ctx = c.pos0 + c.T, kvd = c.Hkv * c.hd;
    const int64_t rows = c.mask.ring_rows > 0 ? c.mask.ring_rows : n_ctx + 20;
    const auto q = random_vec(size_t(c.T * c.H * c.hd), 1);
    auto k = random_vec(size_t(rows * kvd), 2, -2, 2);
    auto v = random_vec(size_t(rows * kvd), 3);
    // Rows no query of the call may see hold a huge value (inf once stored as f16 or as a q8_0
    // scale): reading one would swamp the output.
    const int64_t first_seen =
        c.mask.window > 0 ? std::max<int64_t>(0, c.pos0 + 1 - c.mask.window) : 0;
    for (int64_t r = 0; r < rows; ++r) {
      bool seen = false;
      for (int64_t p = first_seen; p < n_ctx && !seen; ++p)
        seen = (c.mask.ring_rows > 0 ? p % c.mask.ring_rows : p) == r;
      if (!seen)
        for (int64_t i = 0; i < kvd; ++i) k[size_t(r * kvd + i)] = v[size_t(r * kvd + i)] = 1e30f;
    }
    const float scale = 1.0f / std::sqrt(float(c.hd));
    for (auto [kt, vt] : pairs) {
      const TypedRows kr = make_rows(kt, k, rows, kvd), vr = make_rows(vt, v, rows, kvd);
      const auto want = ref::attention(q.data(), kr.seen.data(), vr.seen.data(), c.T, c.pos0, c.H,
                                       c.Hkv, c.hd, scale, c.mask);
      const std::string name =
          std::string(dtype_name(kt)) + "/" + dtype_name(vt) + " T=" + std::to_string(c.T) +
          " pos0=" + std::to_string(c.pos0) + " hd=" + std::to_string(c.hd) +
          " window=" + std::to_string(c.mask.window) + " ring=" + std::to_string(c.mask.ring_rows);
      const KvRows kc{kr.bytes.data(), kt}, vc{vr.bytes.data(), vt};
      for (const SmallOps* ops : tables())
        for (ThreadPool* pool : {&pool1, &pool3}) {
          auto out = poisoned(want.size());
          attention_with(*ops, q.data(), kc, vc, out.data(), c.T, c.pos0, c.H, c.Hkv, c.hd, scale,
                         c.mask, *pool);
          expect_guard(out, want.size(), name);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
                << name << " " << ops->name << " at " << i;
          // Reading another cache ahead (a decode step's next sequence) changes no bit.
          const KvRowsAhead ahead{vr.bytes.data(), kr.bytes.data(), int64_t(vr.bytes.size()),
                                  int64_t(kr.bytes.size())};
          auto again = poisoned(want.size());
          attention_with(*ops, q.data(), kc, vc, again.data(), c.T, c.pos0, c.H, c.Hkv, c.hd, scale,
                         c.mask, *pool, ahead);
          expect_guard(again, want.size(), name);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(again[i], out[i]) << name << " " << ops->name << " read-ahead at " << i;
        }
      auto out = poisoned(want.size());
      attention(q.data(), kc, vc, out.data(), c.T, c.pos0, c.H, c.Hkv, c.hd, scale, c.mask, pool3);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << name << " ops.h at " << i;
    }
  }
}

// A decode step's sequences in one pass (attention_segments) give each sequence's own one-thread
// attention bit for bit: every table, one to three threads, sequences of different lengths (the
// first position among them), few sequences (cut into kv-head groups) and many, sliding window
// with soft-cap, attention sinks, and a ring per sequence.
TEST(KvRows, SegmentsPassMatchesEachSequenceAlone) {
  const int64_t H = 8, Hkv = 2, hd = 64, kvd = Hkv * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> sinks(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) sinks[size_t(h)] = 0.25f * float(h) - 1.0f;
  struct MaskCase {
    AttentionMask mask;
    int64_t ring_rows;
  };
  const MaskCase masks[] = {{{}, 0},
                            {{.window = 40, .softcap = 30}, 0},
                            {{.sinks = sinks.data()}, 0},
                            {{.window = 24}, 30}};
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (const std::vector<int64_t>& positions :
       {std::vector<int64_t>{0, 300, 17, 129, 5, 64, 700, 1}, std::vector<int64_t>{90, 3}}) {
    const int64_t n = int64_t(positions.size());
    const auto q = random_vec(size_t(n * H * hd), 31);
    for (const MaskCase& mc : masks)
      for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
        std::vector<TypedRows> ks, vs;
        std::vector<AttentionSegment> segs;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t rows = mc.ring_rows > 0 ? mc.ring_rows : positions[size_t(i)] + 1;
          ks.push_back(
              make_rows(t, random_vec(size_t(rows * kvd), uint32_t(40 + i), -2, 2), rows, kvd));
          vs.push_back(make_rows(t, random_vec(size_t(rows * kvd), uint32_t(80 + i)), rows, kvd));
        }
        for (int64_t i = 0; i < n; ++i)
          segs.push_back({KvRows{ks[size_t(i)].bytes.data(), t},
                          KvRows{vs[size_t(i)].bytes.data(), t}, positions[size_t(i)],
                          mc.ring_rows});
        const std::string name = std::string(dtype_name(t)) + " n=" + std::to_string(n) +
                                 " window=" + std::to_string(mc.mask.window) +
                                 " ring=" + std::to_string(mc.ring_rows) +
                                 (mc.mask.sinks ? " sinks" : "");
        for (const SmallOps* ops : tables()) {
          std::vector<float> want(size_t(n * H * hd));
          for (int64_t i = 0; i < n; ++i) {
            AttentionMask m = mc.mask;
            m.ring_rows = mc.ring_rows;
            attention_with(*ops, q.data() + i * H * hd, segs[size_t(i)].k, segs[size_t(i)].v,
                           want.data() + i * H * hd, 1, positions[size_t(i)], H, Hkv, hd, scale, m,
                           pool1);
          }
          for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
            auto out = poisoned(want.size());
            attention_segments_with(*ops, q.data(), segs, out.data(), H, Hkv, hd, scale, mc.mask,
                                    *pool);
            expect_guard(out, want.size(), name);
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_EQ(out[i], want[i])
                  << name << " " << ops->name << " threads " << pool->size() << " at " << i;
          }
        }
      }
  }
}

// What each type costs against f32 rows of the same values: the error the goldens then bound
// end to end (tests/golden). f16 and bf16 round each element (2^-11, 2^-8 relative), q8_0 each
// block to 1/254 of its largest magnitude.
TEST(KvRows, TypedAttentionStaysCloseToF32) {
  const int64_t T = 1, pos0 = 255, H = 4, Hkv = 2, hd = 64, kvd = Hkv * hd, rows = pos0 + T;
  const auto q = random_vec(size_t(T * H * hd), 21, -2, 2);
  const auto k = random_vec(size_t(rows * kvd), 22, -2, 2);
  const auto v = random_vec(size_t(rows * kvd), 23);
  const float scale = 1.0f / std::sqrt(float(hd));
  const auto exact =
      ref::attention(q.data(), k.data(), v.data(), T, pos0, H, Hkv, hd, scale, AttentionMask{});
  ThreadPool pool(2);
  for (auto [t, bound] :
       {std::pair{DType::F16, 2e-3}, {DType::BF16, 1.5e-2}, {DType::Q8_0, 2e-2}}) {
    const TypedRows kr = make_rows(t, k, rows, kvd), vr = make_rows(t, v, rows, kvd);
    std::vector<float> out(exact.size());
    attention(q.data(), KvRows{kr.bytes.data(), t}, KvRows{vr.bytes.data(), t}, out.data(), T, pos0,
              H, Hkv, hd, scale, AttentionMask{}, pool);
    double worst = 0, norm = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      worst = std::max(worst, std::fabs(double(out[i]) - exact[i]));
      norm = std::max(norm, std::fabs(double(exact[i])));
    }
    EXPECT_LT(worst / norm, bound) << dtype_name(t);
    EXPECT_GT(worst, 0.0) << dtype_name(t) << ": the rows were not rounded";
  }
}

}  // namespace
}  // namespace hearth::kernels
