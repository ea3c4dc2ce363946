// CudaOptions::half_weights: a quantized weight's fp16 copy, made at its first GEMM, takes the
// prefill GEMMs (no dequantization per call) and passes of at least kHalfCopyMinTokens rows,
// decode steps of many sequences included, from the batched int8 matmul. Every pass size on
// either side of the line against the CPU-dequantized product in float64; the GEMM on the copy
// against the GEMM that dequantizes W itself (the same fp16 W: equal to rounding); the copy's
// device memory, and its giving way when a KV cache needs the memory.
#include <gtest/gtest.h>

#include "backend/cuda/cuda-weights.h"
#include "cuda-test-util.h"
#include "kernels/cuda/decode-batch.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

CudaOptions half_options(bool on) {
  CudaOptions o;
  o.half_weights = on;
  return o;
}

class CudaHalfCopy : public CudaTest, public ::testing::WithParamInterface<DType> {
 protected:
  CudaOptions options() const override { return half_options(true); }
};
class CudaHalfCopyMemory : public CudaTest {
 protected:
  CudaOptions options() const override { return half_options(true); }
};

// x in int8 below kMatmulBatchHalfMinTokens (about 1/250 of a block's range), fp16 above.
double tolerance(DType t, int64_t B) {
  if (B >= cuda::kMatmulBatchHalfMinTokens) return 3e-3;
  return t == DType::Q8_0 ? 1e-4 : 1e-2;
}

TEST_P(CudaHalfCopy, EveryPassSizeMatchesCpu) {
  const DType t = GetParam();
  const int64_t rows = 300, cols = dtype_info(t).block_size == 256 ? 1024 : 1152;
  auto bytes = random_weight_bytes(t, rows, cols, 31);
  Weight w = make_weight(t, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
  const auto wf = cpu_dequant(w);
  // Decode steps of B sequences, then prompts of B tokens; the first 65 makes the copy inside a
  // decode step, 512 reads it in a prefill pass.
  static_assert(kHalfCopyMinTokens == 65, "the sizes below straddle the line");
  bool gemm_ran = false;
  for (auto phase : {Backend::Phase::kDecodeBatch, Backend::Phase::kPrefill}) {
    for (int64_t B : {2, 17, 40, 64, 65, 100, 256, 512}) {
      if (phase == Backend::Phase::kDecodeBatch && B > cuda::kMatmulBatchMaxTokens) continue;
      const auto x = random_floats(size_t(B * cols), uint32_t(B));
      const auto want = reference_matmul(wf, x, rows, cols, B);
      float* y = poisoned(B * rows);
      backend_->begin_pass(phase, B);
      backend_->matmul(w, dev(x), B, y);
      EXPECT_LT(rel_error(get(y, B * rows), want), tolerance(t, B))
          << dtype_name(t) << " B=" << B
          << (phase == Backend::Phase::kPrefill ? " prefill" : " decode batch");
      // The copy exists from the weight's first GEMM on: a pass of kHalfCopyMinTokens rows, or
      // any batch of more than kGemvMaxTokens for a dtype the batched matmul lacks (Q6_K).
      gemm_ran = gemm_ran || (B > cuda::kGemvMaxTokens &&
                              (B >= kHalfCopyMinTokens || !cuda::matmul_batch_supports(t)));
      const bool copied = static_cast<const PreparedWeight*>(w.backend_data.get())->dw.w16;
      EXPECT_EQ(copied, gemm_ran) << dtype_name(t) << " B=" << B;
      // The residual add in the GEMM (beta = 1) on the copy too.
      const auto res = random_floats(size_t(B * rows), uint32_t(B + 7), -2.f, 2.f);
      float* dres = dev(res);
      backend_->begin_pass(phase, B);
      backend_->matmul_add(w, dev(x), B, dres, poisoned(B * rows));
      auto want_add = want;
      for (size_t i = 0; i < want_add.size(); ++i) want_add[i] += res[i];
      EXPECT_LT(rel_error(get(dres, B * rows), want_add), tolerance(t, B))
          << dtype_name(t) << " add, B=" << B;
    }
  }
}

// The copy is the fp16 W the per-call path dequantizes: a backend without copies gives the same
// product (to fp32 rounding: the GEMMs may differ only in algorithm).
TEST_P(CudaHalfCopy, CopyGivesTheDequantizingGemmsProduct) {
  const DType t = GetParam();
  const int64_t rows = 256, cols = 1024, B = 200;
  Status err;
  std::unique_ptr<Backend> plain = make_cuda_backend(0, half_options(false), &err);
  ASSERT_TRUE(plain) << err.message();
  auto bytes = random_weight_bytes(t, rows, cols, 32);
  Weight w = make_weight(t, rows, cols, bytes), w_plain = make_weight(t, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
  ASSERT_TRUE(plain->prepare_weight(w_plain).is_ok()) << plain->status().message();
  const auto x = random_floats(size_t(B * cols), 33, -2.f, 2.f);
  float* y = poisoned(B * rows);
  backend_->matmul(w, dev(x), B, y);
  float* px = plain->alloc(B * cols);
  float* py = plain->alloc(B * rows);
  plain->upload(px, x.data(), B * cols);
  plain->matmul(w_plain, px, B, py);
  std::vector<float> want(size_t(B * rows));
  plain->download(want.data(), py, B * rows);
  EXPECT_LT(rel_error(get(y, B * rows), want), 1e-6) << dtype_name(t);
  EXPECT_TRUE(plain->status().is_ok()) << plain->status().message();
  plain->free(px);
  plain->free(py);
}

// The copy takes 2 bytes a weight of device memory, at the weight's first GEMM (a first weight's
// GEMM sizes the workspace, so the second's takes only its copy).
TEST_P(CudaHalfCopy, FirstGemmMakesTheCopy) {
  const DType t = GetParam();
  const int64_t rows = 4096, cols = 4096, B = 100;
  std::vector<std::vector<uint8_t>> keep;
  std::vector<Weight> ws;
  for (uint32_t seed : {34u, 35u}) {
    keep.push_back(random_weight_bytes(t, rows, cols, seed));
    ws.push_back(make_weight(t, rows, cols, keep.back()));
  }
  for (Weight& w : ws) ASSERT_TRUE(backend_->prepare_weight(w).is_ok());
  float* x = dev(random_floats(size_t(B * cols), 36));
  float* y = poisoned(B * rows);
  backend_->begin_pass(Backend::Phase::kPrefill, B);
  backend_->matmul(ws[0], x, B, y);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  size_t before = 0, after = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&before, &total), cudaSuccess);
  backend_->begin_pass(Backend::Phase::kPrefill, B);
  backend_->matmul(ws[1], x, B, y);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&after, &total), cudaSuccess);
  EXPECT_GE(double(before) - double(after), double(rows * cols * 2)) << dtype_name(t);
}

// The copies give way: with the device's memory taken but for a few MiB, a KV cache's rows are
// committed by freeing the copies (CudaBackend::drop_half_copies), and the weight's GEMMs go on,
// dequantizing W per call, with the same product.
TEST_F(CudaHalfCopyMemory, CopiesGiveWayToKvRows) {
  const uint64_t g = backend_->commit_granularity();
  ASSERT_GT(g, 0u) << "the driver's virtual memory API was not found";
  const int64_t rows = 4096, cols = 4096, B = 100;
  auto bytes = random_weight_bytes(DType::Q4_0, rows, cols, 37);
  Weight w = make_weight(DType::Q4_0, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok());
  const auto xh = random_floats(size_t(B * cols), 38);
  float* x = dev(xh);
  float* y = poisoned(B * rows);
  backend_->begin_pass(Backend::Phase::kPrefill, B);
  backend_->matmul(w, x, B, y);  // makes the 32 MiB copy
  const std::vector<float> with_copy = get(y, B * rows);
  void* base = backend_->reserve_kv(16 * g);
  ASSERT_NE(base, nullptr);
  // Take all free memory but less than the 16 granules the cache will ask for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  void* hog = nullptr;
  for (size_t take = free - 4 * g; take > 16 * g && !hog; take -= 16 * g)
    if (cudaMalloc(&hog, take) != cudaSuccess) hog = nullptr, cudaGetLastError();
  ASSERT_NE(hog, nullptr);
  EXPECT_TRUE(backend_->commit(base, 0, 16 * g)) << "the copies were not given up";
  cudaFree(hog);
  const int64_t n = int64_t(16 * g / 4);
  const std::vector<float> kv_rows = random_floats(size_t(n), 39);
  backend_->upload(static_cast<float*>(base), kv_rows.data(), n);
  EXPECT_EQ(get(static_cast<float*>(base), n), kv_rows);
  float* y2 = poisoned(B * rows);
  backend_->begin_pass(Backend::Phase::kPrefill, B);
  backend_->matmul(w, x, B, y2);
  EXPECT_LT(rel_error(get(y2, B * rows), with_copy), 1e-5);  // (summed in another order)
  backend_->decommit(base, 0, 16 * g);
  backend_->unreserve(base, 16 * g);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaHalfCopy,
                         ::testing::Values(DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hearth::test
