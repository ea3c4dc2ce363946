// Every ISA table this machine can run vs the scalar reference table: dot products (single and
// multi-token calls) and dequantizers for every runnable dtype, odd lengths and block tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu-features.h"
#include "kernels/cpu/kernel-table.h"
#include "kernels/quant-blocks.h"
#include "kernels/quantize.h"

namespace hearth {
namespace {

using kernels::KernelTable;

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                        DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4};

// Row lengths: block tails for the 2-blocks-per-register kernels, odd float lengths.
std::vector<int64_t> lengths_for(DType t) {
  const uint32_t bs = dtype_info(t).block_size;
  if (bs == 1) return {1, 7, 8, 15, 16, 17, 31, 33, 100, 257, 1023, 4099};
  if (bs == 32) return {32, 64, 96, 160, 288, 1056, 4128};
  return {256, 512, 768, 2304, 4352};
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng) * scale;
  // Outliers exercise the extremes of every quantization grid.
  if (n > 8) v[size_t(n / 3)] *= 8;
  return v;
}

std::vector<uint8_t> quantized(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(*row_bytes(t, x.size()));
  EXPECT_TRUE(kernels::quantize_row(t, x.data(), q.data(), int64_t(x.size())).is_ok());
  return q;
}

std::string table_names() {
  std::string s;
  for (const KernelTable* t : kernels::supported_kernel_tables()) s += std::string(t->name) + " ";
  return s;
}

TEST(KernelTables, EveryIsaTheCpuHasIsTested) {
  const CpuFeatures& f = cpu_features();
  const auto tables = kernels::supported_kernel_tables();
  auto has = [&](const char* name) {
    for (const KernelTable* t : tables)
      if (std::string(t->name) == name) return true;
    return false;
  };
  EXPECT_TRUE(has("ref"));
  if (f.avx2 && f.fma && f.f16c) {
    EXPECT_TRUE(has("avx2")) << table_names();
  }
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni) {
    EXPECT_TRUE(has("avx512")) << table_names();
  }
  if (f.neon) {
    EXPECT_TRUE(has(f.arm_dotprod ? "neon-dotprod" : "neon")) << table_names();
  }
  std::printf("  cpu: %s; tables: %s; active: %s\n", f.summary().c_str(), table_names().c_str(),
              kernels::active_kernel_table().name);
  for (const KernelTable* t : tables)
    for (DType d : kTypes) EXPECT_NE(t->of(d).dot, nullptr) << t->name << " " << dtype_name(d);
}

TEST(KernelTables, DotMatchesReferenceOnEveryIsa) {
  const KernelTable& ref = kernels::ref_kernel_table();
  std::mt19937 rng(1234);
  for (const KernelTable* table : kernels::supported_kernel_tables()) {
    for (DType t : kTypes) {
      const kernels::TypeKernels& k = table->of(t);
      ASSERT_EQ(k.act_type, ref.of(t).act_type) << table->name << " " << dtype_name(t);
      for (int64_t n : lengths_for(t)) {
        const std::vector<float> wf = random_floats(n, rng, 0.05f);
        const std::vector<uint8_t> w = quantized(t, wf);
        // Four tokens per call: the multi-token entry must equal four single calls.
        constexpr int kTok = 4;
        const uint64_t xs = *row_bytes(k.act_type, uint64_t(n));
        std::vector<uint8_t> x(xs * kTok);
        std::vector<float> mags(kTok, 0.f);
        for (int tok = 0; tok < kTok; ++tok) {
          const std::vector<float> xf = random_floats(n, rng, 1.0f + tok);
          ASSERT_TRUE(kernels::quantize_row(k.act_type, xf.data(), x.data() + tok * xs, n).is_ok());
          std::vector<float> wd(static_cast<size_t>(n));
          ref.of(t).dequantize(w.data(), wd.data(), n);
          for (int64_t i = 0; i < n; ++i)
            mags[size_t(tok)] += std::fabs(wd[size_t(i)] * xf[size_t(i)]);
        }
        float got[kTok * 2], want[kTok * 2];
        for (int i = 0; i < 2 * kTok; ++i) got[i] = want[i] = -12345.f;  // odd slots: guards
        k.dot(n, w.data(), x.data(), xs, kTok, got, 2);
        ref.of(t).dot(n, w.data(), x.data(), xs, kTok, want, 2);
        for (int tok = 0; tok < kTok; ++tok) {
          // Integer block sums are exact; only the f32 accumulation order differs.
          const float tol = 2e-6f * mags[size_t(tok)] * std::sqrt(float(n)) + 1e-6f;
          EXPECT_NEAR(got[2 * tok], want[2 * tok], tol)
              << table->name << " " << dtype_name(t) << " n=" << n << " token " << tok;
          EXPECT_EQ(got[2 * tok + 1], -12345.f) << table->name << " wrote outside its output";
        }
      }
    }
  }
}

// The word-at-a-time unpacking of Q4_K/Q5_K scales and mins gives kquant_scale_min's values.
TEST(KernelTables, KquantScalesUnpackLikeOneAtATime) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 2000; ++iter) {
    uint8_t q[12];
    for (uint8_t& b : q) b = uint8_t(rng());
    uint8_t sc[8], m[8];
    kernels::kquant_scales_mins(q, sc, m);
    for (int j = 0; j < 8; ++j) {
      uint8_t want_sc, want_m;
      kernels::kquant_scale_min(j, q, &want_sc, &want_m);
      ASSERT_EQ(sc[j], want_sc) << "sub-block " << j;
      ASSERT_EQ(m[j], want_m) << "sub-block " << j;
    }
  }
}

TEST(KernelTables, DequantizeMatchesReferenceExactly) {
  const KernelTable& ref = kernels::ref_kernel_table();
  std::mt19937 rng(99);
  for (const KernelTable* table : kernels::supported_kernel_tables()) {
    for (DType t : kTypes) {
      for (int64_t n : lengths_for(t)) {
        const std::vector<uint8_t> w = quantized(t, random_floats(n, rng, 0.3f));
        constexpr int kGuard = 16;
        std::vector<float> got(size_t(n + 2 * kGuard), 777.f), want(static_cast<size_t>(n));
        table->of(t).dequantize(w.data(), got.data() + kGuard, n);
        ref.of(t).dequantize(w.data(), want.data(), n);
        for (int g = 0; g < kGuard; ++g) {
          ASSERT_EQ(got[size_t(g)], 777.f) << table->name << " " << dtype_name(t);
          ASSERT_EQ(got[size_t(n + kGuard + g)], 777.f) << table->name << " " << dtype_name(t);
        }
        // Dequantization is a product of exact values: SIMD must agree bit for bit.
        EXPECT_EQ(0, std::memcmp(got.data() + kGuard, want.data(), size_t(n) * 4))
            << table->name << " " << dtype_name(t) << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace hearth
