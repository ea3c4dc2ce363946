// The matmul driver vs a float64 reference on every ISA table: odd row counts, token tiles with
// tails, 1 and 2 threads, guard values around the output; plus the activation-quantization cost.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/kernel-table.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "kernels/ref/quant-ref.h"

namespace hearth {
namespace {

struct Case {
  DType type;
  int64_t d, n;
};

const Case kCases[] = {{DType::F32, 37, 67},   {DType::F16, 33, 129},  {DType::BF16, 41, 96},
                       {DType::Q8_0, 37, 160}, {DType::Q4_0, 129, 96}, {DType::Q4_1, 19, 64},
                       {DType::Q5_0, 23, 288}, {DType::Q5_1, 21, 96},  {DType::Q4_K, 35, 512},
                       {DType::Q5_K, 17, 256}, {DType::Q6_K, 29, 768}, {DType::MXFP4, 27, 160}};

constexpr float kGuard = -31337.f;

TEST(Matmul, MatchesFloat64ReferenceOnEveryIsa) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const kernels::KernelTable* table : kernels::supported_kernel_tables()) {
    for (const Case& c : kCases) {
      std::vector<float> wf(size_t(c.d * c.n));
      for (float& v : wf) v = nd(rng) * 0.1f;
      const uint64_t rb = *row_bytes(c.type, uint64_t(c.n));
      std::vector<uint8_t> wq(rb * uint64_t(c.d));
      ASSERT_TRUE(kernels::quantize_rows(c.type, wf.data(), wq.data(), c.d, c.n).is_ok());
      TensorView w{"w", c.type, {c.d, c.n}, wq.data(), wq.size()};
      // The exact weights the kernel sees.
      std::vector<float> wd(wf.size());
      for (int64_t r = 0; r < c.d; ++r)
        table->of(c.type).dequantize(wq.data() + r * rb, wd.data() + r * c.n, c.n);
      const DType act = table->of(c.type).act_type;
      for (int64_t T : {1, 3, 17, 35}) {
        std::vector<float> x(size_t(T * c.n));
        for (float& v : x) v = nd(rng);
        // Reference 1: f64 over the quantized activations (tight: only summation order differs).
        // Reference 2: f64 over the original activations (the activation-quantization cost).
        std::vector<float> xq(x.size());
        if (act == DType::F32) {
          xq = x;
        } else {
          const uint64_t ab = *row_bytes(act, uint64_t(c.n));
          std::vector<uint8_t> tmp(ab);
          for (int64_t t = 0; t < T; ++t) {
            ASSERT_TRUE(kernels::quantize_row(act, x.data() + t * c.n, tmp.data(), c.n).is_ok());
            std::vector<float> back(size_t(c.n));
            if (act == DType::Q8_0) kernels::ref::dequantize_q8_0(tmp.data(), back.data(), c.n);
            if (act == DType::Q8_1) kernels::ref::dequantize_q8_1(tmp.data(), back.data(), c.n);
            if (act == DType::Q8_K) kernels::ref::dequantize_q8_k(tmp.data(), back.data(), c.n);
            std::copy(back.begin(), back.end(), xq.begin() + t * c.n);
          }
        }
        for (int threads : {1, 2}) {
          ThreadPool pool(threads);
          constexpr int64_t kPad = 8;
          std::vector<float> y(size_t(T * c.d + 2 * kPad), kGuard);
          kernels::matmul_with_table(*table, w, x.data(), T, y.data() + kPad, pool);
          for (int64_t g = 0; g < kPad; ++g) {
            ASSERT_EQ(y[size_t(g)], kGuard);
            ASSERT_EQ(y[size_t(T * c.d + kPad + g)], kGuard);
          }
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t r = 0; r < c.d; ++r) {
              double exact = 0, approx = 0, mag = 0, act_err = 0;
              for (int64_t i = 0; i < c.n; ++i) {
                const double wv = wd[size_t(r * c.n + i)];
                exact += wv * x[size_t(t * c.n + i)];
                approx += wv * xq[size_t(t * c.n + i)];
                mag += std::fabs(wv * xq[size_t(t * c.n + i)]);
                act_err +=
                    std::fabs(wv) * std::fabs(x[size_t(t * c.n + i)] - xq[size_t(t * c.n + i)]);
              }
              // Q8_1 stores s = d * sum(q) as fp16; the weight min multiplies that rounding.
              double s_err = 0;
              if (act == DType::Q8_1) {
                for (int64_t b = 0; b < c.n; b += 32) {
                  double s = 0, wmax = 0;
                  for (int64_t i = b; i < b + 32; ++i) {
                    s += xq[size_t(t * c.n + i)];
                    wmax = std::max(wmax, std::fabs(double(wd[size_t(r * c.n + i)])));
                  }
                  s_err += wmax * std::fabs(s) / 1024.0;
                }
              }
              const float got = y[size_t(kPad + t * c.d + r)];
              ASSERT_NEAR(got, approx, 1e-5 * mag + s_err + 1e-6)
                  << table->name << " " << dtype_name(c.type) << " T=" << T << " row " << r;
              // The activation rounding can only cost what its per-element errors allow.
              ASSERT_NEAR(got, exact, act_err + 1e-5 * mag + s_err + 1e-6)
                  << table->name << " " << dtype_name(c.type) << " T=" << T << " row " << r;
            }
          }
        }
      }
    }
  }
}

TEST(Matmul, DequantizeRowUsesActiveTable) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = float(i) - 31.5f;
  std::vector<uint8_t> q(*row_bytes(DType::Q8_0, 64));
  ASSERT_TRUE(kernels::quantize_row(DType::Q8_0, x.data(), q.data(), 64).is_ok());
  std::vector<float> a(64), b(64);
  kernels::dequantize_row(DType::Q8_0, q.data(), a.data(), 64);
  kernels::ref_kernel_table().of(DType::Q8_0).dequantize(q.data(), b.data(), 64);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace hearth
