// F16/BF16 prefill GEMMs (the FP8 correction pass of gemm-fp8.h, or with
// CudaOptions::fp8_prefill off two fp16 passes) against a double-precision CPU product: both
// must stay at two-fp16-pass accuracy (one fp16 pass errs ~1e-4 here).
// Add a shape or token count to the lists below.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include "cuda-test-util.h"
#include "kernels/cuda/cublas-loader.h"
#include "kernels/cuda/gemm-fp8.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

// (dtype, fp8_prefill): the FP8 pass and the two fp16 passes it replaces.
class CudaPrefillGemm : public CudaTest,
                        public ::testing::WithParamInterface<std::tuple<DType, bool>> {
 protected:
  CudaOptions options() const override {
    CudaOptions o;
    o.fp8_prefill = std::get<1>(GetParam());
    return o;
  }
};

// cuBLAS is opened at its first use (cublas-loader.h), not at exec: the libraries built against
// and every function Hearth forwards to must be found (no GPU needed).
TEST(CublasLoader, FindsTheLibrariesAndEveryFunction) {
  EXPECT_EQ(cuda::cublas_load(), "");
}

TEST_P(CudaPrefillGemm, Fp8CorrectionKeepsTwoPassAccuracy) {
  const auto [t, fp8] = GetParam();
  cublasHandle_t blas = nullptr;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  // 48 x 512 and 80 x 1040 (odd multiples of 16); 64 and 512 tokens take the FP8 pass, 17 (no
  // FP8 algorithm for that width, or if there is one, the same check) must be as accurate.
  const int64_t shapes[][2] = {{48, 512}, {80, 1040}};
  for (const auto& sh : shapes) {
    const int64_t rows = sh[0], cols = sh[1];
    auto bytes = random_weight_bytes(t, rows, cols, uint32_t(rows + cols));
    Weight w = make_weight(t, rows, cols, bytes);
    ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
    const std::vector<float> wf = cpu_dequant(w);
    for (int64_t n_tokens : {int64_t(64), int64_t(17), int64_t(512)}) {
      // Activations with a wide spread of magnitudes, as after rmsnorm with outlier channels,
      // at three overall sizes: x_lo's FP8 form has a fixed scale (gemm-fp8.cu), so its range
      // must hold from small activations to ones with outliers near 5,000.
      for (float magnitude : {1.f, 1e-3f, 40.f}) {
        auto x = random_floats(size_t(n_tokens * cols), uint32_t(n_tokens), -3.f, 3.f);
        for (size_t i = 0; i < x.size(); i += 97) x[i] *= 40.f;
        for (float& v : x) v *= magnitude;
        const std::vector<float> want = reference_matmul(wf, x, rows, cols, n_tokens);
        float* y = poisoned(n_tokens * rows);
        backend_->matmul(w, dev(x), n_tokens, y);
        const double err = rel_error(get(y, n_tokens * rows), want);
        EXPECT_LT(err, 3e-5) << dtype_name(t) << " " << rows << "x" << cols << " T=" << n_tokens
                             << " x magnitude " << magnitude;
      }
      if (fp8 && n_tokens != 17) {
        EXPECT_TRUE(cuda::fp8_gemm_supported(blas, rows, cols, n_tokens))
            << "no FP8 algorithm for " << rows << "x" << cols << " T=" << n_tokens;
      }
    }
  }
  EXPECT_TRUE(cuda::gemm_fp8_working()) << "an FP8 GEMM failed on the device";
  cublasDestroy(blas);
}

// Q, K and V (gate and up) read one x: the backend converts it once (matmul.cu PrefillX) and
// must convert again whenever x may have changed: an op writing x, an upload into it, a matmul
// writing it. A stale conversion would give the old product (errors of order 1).
class CudaPrefillSharedX : public CudaTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaPrefillSharedX, ConvertedXFollowsEveryWrite) {
  const DType t = GetParam();
  const int64_t cols = 512, T = 40;
  const double tol = t == DType::Q4_0 ? 1e-3 : 3e-5;  // Q4_0 takes one fp16 pass
  std::vector<Weight> ws;
  std::vector<std::vector<float>> wf;
  std::vector<std::vector<uint8_t>> keep;
  for (int64_t rows : {int64_t(96), int64_t(48), int64_t(cols)}) {
    keep.push_back(random_weight_bytes(t, rows, cols, uint32_t(rows)));
    ws.push_back(make_weight(t, rows, cols, keep.back()));
    ASSERT_TRUE(backend_->prepare_weight(ws.back()).is_ok()) << backend_->status().message();
    wf.push_back(cpu_dequant(ws.back()));
  }
  auto check = [&](size_t wi, float* x, const std::vector<float>& xh, const char* when) {
    const int64_t rows = ws[wi].host.rows();
    float* y = poisoned(T * rows);
    backend_->matmul(ws[wi], x, T, y);
    EXPECT_LT(rel_error(get(y, T * rows), reference_matmul(wf[wi], xh, rows, cols, T)), tol)
        << dtype_name(t) << " weight " << wi << " " << when;
  };
  auto xh = random_floats(size_t(T * cols), 5, -2.f, 2.f);
  float* x = dev(xh);
  check(0, x, xh, "first");
  check(1, x, xh, "same x, second weight");
  // x += d through a backend op.
  const auto d = random_floats(xh.size(), 6, -1.f, 1.f);
  backend_->add_inplace(x, dev(d), int64_t(xh.size()));
  for (size_t i = 0; i < xh.size(); ++i) xh[i] += d[i];
  check(1, x, xh, "after add_inplace");
  // New contents by upload.
  xh = random_floats(xh.size(), 7, -3.f, 3.f);
  backend_->upload(x, xh.data(), int64_t(xh.size()));
  check(0, x, xh, "after upload");
  // x overwritten by a product (square weight: [T, cols] -> [T, cols]) from another buffer.
  const auto zh = random_floats(xh.size(), 8, -1.f, 1.f);
  backend_->matmul(ws[2], dev(zh), T, x);
  xh = get(x, int64_t(xh.size()));
  check(1, x, xh, "after a matmul wrote x");
  // A decode-sized product (2 tokens: the GEMV path, which converts nothing) into x's first rows.
  const auto z2 = random_floats(size_t(2 * cols), 9, -1.f, 1.f);
  backend_->matmul(ws[2], dev(z2), 2, x);
  xh = get(x, int64_t(xh.size()));
  check(0, x, xh, "after a GEMV wrote part of x");
}

// matmul_add: y += x . W^T, in the GEMM for prefill (beta = 1; the FP8 correction first), the
// default matmul + add for decode sizes. Against y + the CPU product; rows not written stay.
TEST_P(CudaPrefillSharedX, MatmulAddAccumulatesIntoY) {
  const DType t = GetParam();
  const int64_t rows = 80, cols = 512;
  const double tol = t == DType::Q4_0 ? 1e-3 : 3e-5;
  auto bytes = random_weight_bytes(t, rows, cols, 11);
  Weight w = make_weight(t, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
  const std::vector<float> wf = cpu_dequant(w);
  for (int64_t T : {int64_t(2), int64_t(40), int64_t(512)}) {
    const auto xh = random_floats(size_t(T * cols), uint32_t(T), -2.f, 2.f);
    const auto yh = random_floats(size_t(T * rows), uint32_t(T + 1), -50.f, 50.f);
    std::vector<float> want = reference_matmul(wf, xh, rows, cols, T);
    for (size_t i = 0; i < want.size(); ++i) want[i] += yh[i];
    float* y = dev(yh);
    backend_->matmul_add(w, dev(xh), T, y, poisoned(T * rows));
    EXPECT_LT(rel_error(get(y, T * rows), want), tol) << dtype_name(t) << " T=" << T;
  }
}

// The fp16 GEMMs take one cuBLASLt algorithm per power-of-two bucket of token counts
// (gemm-half-lt.h), chosen for the bucket's largest count at the first count met: every count
// of a bucket, met in any order, must give the product (129-256: first 200, then the bucket's
// ends and a count between; 257-512 the same).
TEST_P(CudaPrefillSharedX, EveryTokenCountOfABucketMatchesCpu) {
  const DType t = GetParam();
  const int64_t rows = 96, cols = 512;
  const double tol = t == DType::Q4_0 ? 1e-3 : 3e-5;
  auto bytes = random_weight_bytes(t, rows, cols, 12);
  Weight w = make_weight(t, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
  const std::vector<float> wf = cpu_dequant(w);
  for (int64_t T : {200, 256, 129, 139, 300, 512, 257, 431}) {
    const auto x = random_floats(size_t(T * cols), uint32_t(T), -2.f, 2.f);
    const std::vector<float> want = reference_matmul(wf, x, rows, cols, T);
    float* y = poisoned(T * rows);
    backend_->matmul(w, dev(x), T, y);
    EXPECT_LT(rel_error(get(y, T * rows), want), tol) << dtype_name(t) << " T=" << T;
  }
  EXPECT_TRUE(backend_->status().is_ok()) << backend_->status().message();
}

// After a prefill GEMM, the prefill rmsnorm and swiglu write their outputs' split forms for the
// next GEMM themselves (cuda-backend-ops.cpp producer_split): that GEMM must see exactly those
// outputs, also when a second weight of another width reads the same values as [T', cols'].
TEST_P(CudaPrefillSharedX, ProducersWriteTheSplitTheGemmReads) {
  const DType t = GetParam();
  const int64_t cols = 512, T = 40, wide = 1024;
  const double tol = t == DType::Q4_0 ? 1e-3 : 3e-5;
  std::vector<std::vector<uint8_t>> keep;
  auto weight = [&](int64_t rows, int64_t c, uint32_t seed) {
    keep.push_back(random_weight_bytes(t, rows, c, seed));
    Weight w = make_weight(t, rows, c, keep.back());
    EXPECT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
    return w;
  };
  Weight up = weight(wide, cols, 21), down = weight(cols, wide, 22), other = weight(64, 256, 23);
  const std::vector<float> upf = cpu_dequant(up), downf = cpu_dequant(down),
                           otherf = cpu_dequant(other);
  auto xh = random_floats(size_t(T * cols), 24, -2.f, 2.f);
  const auto nw = random_floats(size_t(cols), 25, 0.5f, 1.5f);
  float* x = dev(xh);
  float* xn = poisoned(T * cols);
  // A first GEMM (so the last GEMM took split forms), then rmsnorm -> GEMM.
  backend_->matmul(up, x, T, poisoned(T * wide));
  backend_->rmsnorm(x, dev(nw), xn, T, cols, 1e-5f);
  std::vector<float> xnh(xh.size());
  kernels::rmsnorm(xh.data(), nw.data(), xnh.data(), T, cols, 1e-5f);
  float* g = poisoned(T * wide);
  backend_->matmul(up, xn, T, g);
  const std::vector<float> gh = reference_matmul(upf, xnh, wide, cols, T);
  EXPECT_LT(rel_error(get(g, T * wide), gh), tol) << dtype_name(t) << " after rmsnorm";
  // swiglu in place (as forward.cpp calls it) -> GEMM, then a weight of another width.
  float* u = dev(random_floats(size_t(T * wide), 26, -2.f, 2.f));
  const std::vector<float> uh = get(u, T * wide), gcur = get(g, T * wide);
  std::vector<float> sh(gcur.size());
  kernels::swiglu(gcur.data(), uh.data(), sh.data(), int64_t(sh.size()));
  backend_->swiglu(g, u, g, T * wide);
  float* y = poisoned(T * cols);
  backend_->matmul(down, g, T, y);
  EXPECT_LT(rel_error(get(y, T * cols), reference_matmul(downf, sh, cols, wide, T)), tol)
      << dtype_name(t) << " after swiglu";
  const int64_t T2 = T * wide / 256;
  float* y2 = poisoned(T2 * 64);
  backend_->matmul(other, g, T2, y2);
  EXPECT_LT(rel_error(get(y2, T2 * 64), reference_matmul(otherf, sh, 64, 256, T2)), tol)
      << dtype_name(t) << " same values as [" << T2 << ", 256]";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaPrefillSharedX,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q4_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Float, CudaPrefillGemm,
                         ::testing::Combine(::testing::Values(DType::F16, DType::BF16),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_fp8" : "_two_fp16_passes");
                         });

}  // namespace
}  // namespace hearth::test
