// The AMX prefill GEMM (kernel-table.h PrefillGemm) against a float64 reference over the exact
// dequantized weights: every dtype it takes, odd shapes, token tails, poisoned outputs, threads;
// and the drivers (matmul, matmul_packed) choose it exactly when they should, or fall back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/cpu-features.h"
#include "kernels/cpu/kernel-table.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"

namespace hearth {
namespace {

using kernels::PrefillPrecision;

struct Case {
  DType type;
  int64_t d, n;
};

// d not a multiple of 16 or 32, n not a multiple of 64 (nor of the 32-wide tile for n = 80:
// Q4_0 blocks of 32 only constrain n to 32; 80 is not valid for them, so 96/160 stand in).
const Case kCases[] = {{DType::Q4_0, 37, 96},  {DType::Q4_0, 64, 160}, {DType::Q4_1, 19, 96},
                       {DType::Q5_0, 33, 288}, {DType::Q5_1, 21, 96},  {DType::Q8_0, 45, 160},
                       {DType::Q8_0, 16, 32},  {DType::Q4_K, 35, 512}, {DType::Q5_K, 17, 256},
                       {DType::Q6_K, 29, 768}};

const int64_t kTokenCounts[] = {1, 2, 15, 16, 17, 31, 32, 33, 40};

struct Matrix {
  std::vector<uint8_t> q;  // file layout
  std::vector<float> f;    // the exact dequantized rows [d, n]
};

Matrix random_matrix(DType t, int64_t d, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 0.1f);
  std::vector<float> wf(size_t(d * n));
  for (float& v : wf) v = nd(rng);
  Matrix m;
  const uint64_t rb = *row_bytes(t, uint64_t(n));
  m.q.resize(rb * uint64_t(d));
  EXPECT_TRUE(kernels::quantize_rows(t, wf.data(), m.q.data(), d, n).is_ok());
  m.f.resize(wf.size());
  for (int64_t r = 0; r < d; ++r)
    kernels::ref_kernel_table().of(t).dequantize(m.q.data() + r * rb, m.f.data() + r * n, n);
  return m;
}

// A RowSource over the exact f32 rows, handing out `group` rows at a time.
struct F32Rows {
  const float* f;
};
void fill_f32(const void* ctx, int64_t r0, int64_t rows, int64_t n, float* out) {
  const float* f = static_cast<const F32Rows*>(ctx)->f;
  std::memcpy(out, f + r0 * n, size_t(rows * n) * sizeof(float));
}

// Largest |got - f64 reference| over what bf16 rounding allows, per element: each product
// w * x is off by at most (rel_w + rel_x) |w x|; f32 accumulation adds ~1e-6 of the magnitude.
double worst_ratio(const std::vector<float>& y, int64_t y_stride, const std::vector<float>& w,
                   const std::vector<float>& x, int64_t d, int64_t n, int64_t T, double rel) {
  double worst = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < d; ++r) {
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double p = double(w[size_t(r * n + i)]) * x[size_t(t * n + i)];
        exact += p;
        mag += std::fabs(p);
      }
      const double got = y[size_t(t * y_stride + r)];
      if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(got - exact) / (rel * mag + 2e-6 * mag + 1e-7));
    }
  return worst;
}

float round_to_bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&v, &u, 4);
  return v;
}

const kernels::PrefillGemm* active_gemm() {
  return kernels::prefill_gemm_for(kernels::active_kernel_table());
}

void describe(const kernels::PrefillGemm* g) {
  const CpuFeatures& f = cpu_features();
  std::printf("  cpu: %s; amx permission: %s; prefill gemm: %s (Q4_0 from %lld tokens)\n",
              f.summary().c_str(),
              f.amx_tile ? (request_amx_permission() ? "granted" : "refused") : "n/a (no AMX)",
              g ? g->name : "none, the table kernels run",
              (long long)kernels::prefill_min_tokens(DType::Q4_0));
}

// When AMX is there and the table is AVX-512, it must be offered: a silent fallback would hide
// a broken detection. (Whether a matmul uses it is the caller's MatrixEngineOptions, below.)
TEST(Amx, AvailableWhenTheCpuHasIt) {
  const kernels::PrefillGemm* g = active_gemm();
  describe(g);
  const CpuFeatures& f = cpu_features();
  const bool want = f.amx_bf16 && f.avx512_bf16 && request_amx_permission() &&
                    kernels::active_kernel_table().isa == kernels::Isa::kAvx512;
  EXPECT_EQ(g != nullptr, want);
  if (!g) std::printf("  AMX not usable here: checking that the table kernels are the fallback\n");
}

TEST(Amx, MatchesFloat64ReferenceForEveryDtype) {
  const kernels::PrefillGemm* g = active_gemm();
  if (!g) GTEST_SKIP() << "no AMX on this machine (Amx.FallbackIsTheTableKernel covers it)";
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const Case& c : kCases) {
    const Matrix m = random_matrix(c.type, c.d, c.n, rng);
    const PrefillPrecision prec = *kernels::prefill_precision(c.type);
    const F32Rows ctx{m.f.data()};
    for (int64_t group : {int64_t(1), int64_t(16)}) {
      if (group == 16 && c.d % 16 != 0) continue;  // packed sources: d a multiple of the group
      const kernels::RowSource src{fill_f32, &ctx, group};
      for (int64_t T : kTokenCounts) {
        std::vector<float> x(size_t(T * c.n));
        for (float& v : x) v = nd(rng);
        // Rows of y are y_stride apart with poison between and around them.
        const int64_t y_stride = c.d + 5;
        const float poison = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> first;
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          std::vector<float> y(size_t(T * y_stride + 7), poison);
          g->run(src, c.d, c.n, prec, x.data(), T, y.data(), y_stride, pool);
          for (int64_t t = 0; t < T; ++t)
            for (int64_t r = c.d; r < y_stride; ++r)
              ASSERT_TRUE(std::isnan(y[size_t(t * y_stride + r)])) << "wrote past row " << t;
          for (int64_t i = T * y_stride; i < int64_t(y.size()); ++i)
            ASSERT_TRUE(std::isnan(y[size_t(i)])) << "wrote past the end";
          // bf16 activations: 2^-9 relative; weights 2^-9 (single) or ~2^-16 (split).
          const double rel = prec == PrefillPrecision::kSingle ? 0x1p-8 : 0x1p-9 + 0x1p-15;
          const double worst = worst_ratio(y, y_stride, m.f, x, c.d, c.n, T, rel);
          ASSERT_LE(worst, 1.0) << dtype_name(c.type) << " d=" << c.d << " n=" << c.n << " T=" << T
                                << " group=" << group << " threads=" << threads;
          if (threads == 1) first = y;
          // Each output's summation order is fixed: thread count cannot change a bit.
          for (size_t i = 0; i < y.size(); ++i) {
            if (!std::isnan(first[i])) {
              ASSERT_EQ(y[i], first[i]) << "threads=" << threads;
            }
          }
        }
      }
    }
  }
}

// Exact operands make the check tight: activations already bf16, Q4_0 weights (fp16 scale x
// 4-bit code, 15 significant bits) exact as hi + lo. Only f32 accumulation order remains, so a
// misplaced tile or pair shows up even where the loose bf16 bound would hide it.
TEST(Amx, ExactOperandsGiveF32Accuracy) {
  const kernels::PrefillGemm* g = active_gemm();
  if (!g) GTEST_SKIP() << "no AMX on this machine (Amx.FallbackIsTheTableKernel covers it)";
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto [d, n] : {std::pair<int64_t, int64_t>{37, 96}, {80, 2048}}) {
    const Matrix m = random_matrix(DType::Q4_0, d, n, rng);
    const F32Rows ctx{m.f.data()};
    for (int64_t T : kTokenCounts) {
      std::vector<float> x(size_t(T * n));
      for (float& v : x) v = round_to_bf16(nd(rng));
      ThreadPool pool(2);
      std::vector<float> y(size_t(T * d));
      g->run(kernels::RowSource{fill_f32, &ctx, 1}, d, n, PrefillPrecision::kSplitWeights, x.data(),
             T, y.data(), d, pool);
      EXPECT_LE(worst_ratio(y, d, m.f, x, d, n, T, 0.0), 1.0)
          << "d=" << d << " n=" << n << " T=" << T;
    }
  }
}

// matmul and matmul_packed take the engine from prefill_min_tokens() on (their results equal
// the engine's bit for bit) and the table kernels below it; without AMX, always the table. The
// caller's options move the threshold (--amx-min-tokens) or turn the engine off (--no-amx).
struct EngineCase {
  const char* name;
  kernels::MatrixEngineOptions engine;
};
const EngineCase kEngineCases[] = {
    {"measured threshold", {}},
    {"off", {false, 0}},
    {"from 1 token", {true, 1}},
    {"off with a threshold", {false, 1}},
};

TEST(Amx, ChoiceFollowsTheOptions) {
  const kernels::KernelTable& table = kernels::active_kernel_table();
  const kernels::PrefillGemm* g = active_gemm();
  EXPECT_EQ(kernels::prefill_min_tokens(DType::Q4_0, {true, 5}), 5);
  EXPECT_EQ(kernels::prefill_min_tokens(DType::Q4_0, {}), kernels::prefill_min_tokens(DType::Q4_0));
  EXPECT_GT(kernels::prefill_min_tokens(DType::Q4_K), 1);
  for (const EngineCase& ec : kEngineCases)
    for (DType t : {DType::Q4_0, DType::Q8_0, DType::F16})
      for (int64_t T : {int64_t(1), int64_t(4096)}) {
        const auto chosen = kernels::choose_prefill_gemm(table, t, T, ec.engine);
        const bool want = g && ec.engine.enabled && kernels::prefill_precision(t) &&
                          T >= kernels::prefill_min_tokens(t, ec.engine);
        EXPECT_EQ(chosen.has_value(), want) << ec.name << " " << dtype_name(t) << " T=" << T;
        if (chosen) {
          EXPECT_EQ(chosen->gemm, g);
          EXPECT_EQ(chosen->precision, *kernels::prefill_precision(t));
        }
      }
}

TEST(Amx, DriversChooseItFromTheThreshold) {
  const kernels::PrefillGemm* g = active_gemm();
  describe(g);
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const EngineCase& ec : kEngineCases)
    for (const Case& c :
         {Case{DType::Q4_0, 64, 256}, Case{DType::Q8_0, 48, 128}, Case{DType::Q4_K, 32, 256},
          Case{DType::Q6_K, 19, 256}, Case{DType::F16, 33, 64}}) {
      SCOPED_TRACE(ec.name);
      const int64_t min_t = kernels::prefill_min_tokens(c.type, ec.engine);
      const Matrix m = random_matrix(c.type, c.d, c.n, rng);
      TensorView w{"w", c.type, {c.d, c.n}, m.q.data(), m.q.size()};
      const F32Rows ctx{m.f.data()};
      const auto prec = kernels::prefill_precision(c.type);
      ThreadPool pool(2);
      for (int64_t T : {std::max<int64_t>(1, min_t - 1), min_t, min_t + 9}) {
        std::vector<float> x(size_t(T * c.n));
        for (float& v : x) v = nd(rng);
        std::vector<float> got(size_t(T * c.d), -1.f), table(size_t(T * c.d), -2.f);
        kernels::matmul(w, x.data(), T, got.data(), pool, ec.engine);
        kernels::matmul_with_table(kernels::active_kernel_table(), w, x.data(), T, table.data(),
                                   pool);
        const bool engine = g && prec && ec.engine.enabled && T >= min_t;
        if (engine) {
          std::vector<float> want(size_t(T * c.d), -3.f);
          g->run(kernels::RowSource{fill_f32, &ctx, 1}, c.d, c.n, *prec, x.data(), T, want.data(),
                 c.d, pool);
          EXPECT_EQ(got, want) << dtype_name(c.type) << " T=" << T << ": matmul skipped the engine";
        } else {
          EXPECT_EQ(got, table) << dtype_name(c.type) << " T=" << T << ": expected the table path";
        }
        // Packed weights: the engine reads them back through unpack_rows.
        const auto bytes = kernels::packed_size(c.type, c.d, c.n);
        if (!bytes) continue;
        std::vector<uint8_t> storage(*bytes + 64);
        auto* packed = reinterpret_cast<uint8_t*>((uintptr_t(storage.data()) + 63) / 64 * 64);
        kernels::pack_weight(w, packed, pool);
        std::vector<float> pg(size_t(T * c.d), -4.f);
        kernels::matmul_packed(c.type, packed, c.d, c.n, x.data(), T, pg.data(), pool, ec.engine);
        if (engine) {
          EXPECT_EQ(pg, got) << dtype_name(c.type) << " T=" << T << ": packed skipped the engine";
        } else {
          // The layout's own kernel ran (ops_kernels_test's Packed tests hold it to the table);
          // here only check that it wrote every output.
          for (size_t i = 0; i < pg.size(); ++i) ASSERT_NE(pg[i], -4.f) << dtype_name(c.type);
        }
      }
    }
}

}  // namespace
}  // namespace hearth
