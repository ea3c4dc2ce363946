// F16/BF16 prefill GEMMs (the FP8 correction pass of gemm-fp8.h, or with HEARTH_CUDA_GEMM_FP8=0
// two fp16 passes) against a double-precision CPU product: both must stay at two-fp16-pass
// accuracy (one fp16 pass errs ~1e-4 here).
// Add a shape or token count to the lists below.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include "cuda-test-util.h"
#include "kernels/cuda/gemm-fp8.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

class CudaPrefillGemm : public CudaTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaPrefillGemm, Fp8CorrectionKeepsTwoPassAccuracy) {
  const DType t = GetParam();
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
    std::vector<float> wf(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      kernels::dequantize_row(t, w.host.row(r), wf.data() + r * cols, cols);
    for (int64_t n_tokens : {int64_t(64), int64_t(17), int64_t(512)}) {
      // Activations with a wide spread of magnitudes, as after rmsnorm with outlier channels.
      auto x = random_floats(size_t(n_tokens * cols), uint32_t(n_tokens), -3.f, 3.f);
      for (size_t i = 0; i < x.size(); i += 97) x[i] *= 40.f;
      const std::vector<float> want = reference_matmul(wf, x, rows, cols, n_tokens);
      float* y = poisoned(n_tokens * rows);
      backend_->matmul(w, dev(x), n_tokens, y);
      const double err = rel_error(get(y, n_tokens * rows), want);
      EXPECT_LT(err, 3e-5) << dtype_name(t) << " " << rows << "x" << cols << " T=" << n_tokens;
      if (cuda::gemm_fp8_enabled() && n_tokens != 17) {
        EXPECT_TRUE(cuda::fp8_gemm_supported(blas, rows, cols, n_tokens))
            << "no FP8 algorithm for " << rows << "x" << cols << " T=" << n_tokens;
      }
    }
  }
  EXPECT_TRUE(cuda::gemm_fp8_working()) << "an FP8 GEMM failed on the device";
  cublasDestroy(blas);
}

INSTANTIATE_TEST_SUITE_P(Float, CudaPrefillGemm, ::testing::Values(DType::F16, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hearth::test
