// The batched decode matmul (matmul-batch.cu) through the backend in a Phase::kDecodeBatch pass:
// every B of a decode step of many sequences against the CPU-dequantized product in float64,
// outputs poisoned first. Row counts leave partial row tiles; column counts give one split with
// a partial step (96, 256) and several splits with a partial last split (2048, 2304). Dtypes
// the batched matmul lacks (Q6_K, F16) must still be right through the GEMM.
#include <gtest/gtest.h>

#include "cuda-test-util.h"
#include "kernels/cuda/decode-batch.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

// x rounds to int8 blocks of 32 as in the GEMV (about 1/250 of each block's range; Q8_0 adds a
// residual level); the GEMM path rounds to fp16. A wrong nibble, scale or row errs by ~100%.
double tolerance(DType t) {
  if (t == DType::Q8_0) return 1e-4;
  return cuda::matmul_batch_supports(t) ? 1e-2 : 3e-3;
}

class CudaBatchMatmul : public CudaTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaBatchMatmul, EveryBatchSizeMatchesCpu) {
  const DType t = GetParam();
  const bool k_quant = dtype_info(t).block_size == 256;
  const int64_t rows = 300;
  for (int64_t cols : k_quant ? std::vector<int64_t>{256, 2304} : std::vector<int64_t>{96, 2048}) {
    auto bytes = random_weight_bytes(t, rows, cols, uint32_t(cols));
    Weight w = make_weight(t, rows, cols, bytes);
    ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
    const auto wf = cpu_dequant(w);
    for (int64_t B : {2, 3, 5, 8, 17, 32, 64, 256}) {
      const auto x = random_floats(size_t(B * cols), uint32_t(B));
      const auto want = reference_matmul(wf, x, rows, cols, B);
      float* y = poisoned(B * rows);
      backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
      backend_->matmul(w, dev(x), B, y);
      EXPECT_LT(rel_error(get(y, B * rows), want), tolerance(t))
          << dtype_name(t) << " " << rows << "x" << cols << " B=" << B;
    }
  }
}

// Q/K/V-like matrices of one x in one launch (row counts of 1, 2 and 3 tiles, one partial), and
// the residual add of matmul_add, at a batch of two token groups (B = 100 > 64).
TEST_P(CudaBatchMatmul, SharedXAndResidualAdd) {
  const DType t = GetParam();
  const int64_t cols = dtype_info(t).block_size == 256 ? 1024 : 1056, B = 100;
  const int64_t rows[3] = {37, 130, 300};
  std::vector<std::vector<uint8_t>> keep;
  std::vector<Weight> ws;
  keep.reserve(3);
  ws.reserve(3);
  for (int i = 0; i < 3; ++i) {
    keep.push_back(random_weight_bytes(t, rows[i], cols, uint32_t(50 + i)));
    ws.push_back(make_weight(t, rows[i], cols, keep.back()));
    ASSERT_TRUE(backend_->prepare_weight(ws.back()).is_ok()) << backend_->status().message();
  }
  const auto xh = random_floats(size_t(B * cols), 9);
  float* x = dev(xh);
  float* ys[3];
  for (int i = 0; i < 3; ++i) ys[i] = poisoned(B * rows[i]);
  backend_->begin_pass(Backend::Phase::kDecodeBatch, B);
  const Backend::MatmulOut outs[] = {{&ws[0], ys[0]}, {&ws[1], ys[1]}, {&ws[2], ys[2]}};
  backend_->matmul_shared(x, B, outs);
  for (int i = 0; i < 3; ++i) {
    const auto want = reference_matmul(cpu_dequant(ws[i]), xh, rows[i], cols, B);
    EXPECT_LT(rel_error(get(ys[i], B * rows[i]), want), tolerance(t))
        << dtype_name(t) << " job " << i << " rows " << rows[i];
  }
  // residual += x . W2^T, W2 {300, cols}: the product rides in the matmul's store.
  const auto res = random_floats(size_t(B * rows[2]), 10, -2.f, 2.f);
  float* dres = dev(res);
  float* scratch = poisoned(B * rows[2]);
  backend_->matmul_add(ws[2], x, B, dres, scratch);
  auto want = reference_matmul(cpu_dequant(ws[2]), xh, rows[2], cols, B);
  for (size_t i = 0; i < want.size(); ++i) want[i] += res[i];
  EXPECT_LT(rel_error(get(dres, B * rows[2]), want), tolerance(t)) << dtype_name(t) << " add";
}

INSTANTIATE_TEST_SUITE_P(Types, CudaBatchMatmul,
                         ::testing::Values(DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K,
                                           DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hearth::test
