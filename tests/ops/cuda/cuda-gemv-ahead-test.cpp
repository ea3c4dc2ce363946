// The one-token int8 GEMV whose blocks copy their weight rows into shared memory before the PDL
// wait (gemv-int8.cu, CudaOptions::gemv_ahead; Q6_K, the dtype it runs for), through the
// backend: row lengths of 8 and 16 super-blocks, Q/K/V-like matrices of one x (row counts that
// leave a partial block of 16 rows) and the residual add, against the CPU-dequantized product
// in float64 and against a second backend that loads the rows after the wait (the same sums in
// the same order: that kernel does not split a Q6_K row's steps over warps).
#include <gtest/gtest.h>

#include "cuda-test-util.h"
#include "kernels/cuda/cuda-ops.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

class CudaGemvAhead : public CudaTest, public ::testing::WithParamInterface<DType> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (!backend_) return;
    CudaOptions o;
    o.gemv_ahead = false;
    Status err;
    after_ = make_cuda_backend(0, o, &err);
    ASSERT_TRUE(after_) << err.message();
  }
  ~CudaGemvAhead() override {
    for (float* p : after_owned_) after_->free(p);
  }
  float* after_dev(const std::vector<float>& host) {
    float* p = after_->alloc(int64_t(host.size()));
    after_->upload(p, host.data(), int64_t(host.size()));
    after_owned_.push_back(p);
    return p;
  }
  std::vector<float> after_get(const float* p, int64_t n) {
    std::vector<float> h(static_cast<size_t>(n));
    after_->download(h.data(), p, n);
    return h;
  }

  std::unique_ptr<Backend> after_;
  std::vector<float*> after_owned_;
};

TEST_P(CudaGemvAhead, MatchesCpuAndTheRowsLoadedAfterTheWait) {
  const DType t = GetParam();
  const bool k_quant = dtype_info(t).block_size == 256;
  // x rounds to int8 blocks of 32 (about 1/250 of a block's range; Q8_0/Q6_K read a residual
  // level, about 1/30000). A wrong nibble, scale or row errs by ~100%.
  const double tol = t == DType::Q8_0 || t == DType::Q6_K ? 1e-4 : 1e-2;
  for (int64_t cols :
       k_quant ? std::vector<int64_t>{2048, 4096} : std::vector<int64_t>{1024, 4096}) {
    ASSERT_GT(cuda::gemv_ahead_smem_bytes(t, cols), 0)
        << dtype_name(t) << " " << cols << ": the copy must take these rows, or nothing is tested";
    const int64_t rows[3] = {37, 21, 64};
    std::vector<std::vector<uint8_t>> keep;
    std::vector<Weight> ws;
    keep.reserve(3);
    ws.reserve(3);
    for (int i = 0; i < 3; ++i) {
      keep.push_back(random_weight_bytes(t, rows[i], cols, uint32_t(cols + i)));
      ws.push_back(make_weight(t, rows[i], cols, keep.back()));
      ASSERT_TRUE(backend_->prepare_weight(ws.back()).is_ok()) << backend_->status().message();
      ASSERT_TRUE(after_->prepare_weight(ws.back()).is_ok()) << after_->status().message();
    }
    const auto xh = random_floats(size_t(cols), uint32_t(cols));
    float* x = dev(xh);
    float* x_after = after_dev(xh);
    float *ys[3], *ys_after[3];
    for (int i = 0; i < 3; ++i) {
      ys[i] = poisoned(rows[i]);
      ys_after[i] = after_dev(std::vector<float>(size_t(rows[i]), NAN));
    }
    const Backend::MatmulOut outs[] = {{&ws[0], ys[0]}, {&ws[1], ys[1]}, {&ws[2], ys[2]}};
    const Backend::MatmulOut outs_after[] = {
        {&ws[0], ys_after[0]}, {&ws[1], ys_after[1]}, {&ws[2], ys_after[2]}};
    backend_->matmul_shared(x, 1, outs);
    after_->matmul_shared(x_after, 1, outs_after);
    for (int i = 0; i < 3; ++i) {
      const auto want = reference_matmul(cpu_dequant(ws[i]), xh, rows[i], cols, 1);
      const auto got = get(ys[i], rows[i]);
      EXPECT_LT(rel_error(got, want), tol) << dtype_name(t) << " " << cols << " job " << i;
      EXPECT_LT(rel_error(got, after_get(ys_after[i], rows[i])), 1e-6)
          << dtype_name(t) << " " << cols << " job " << i << " against the load after the wait";
    }
    // residual += x . W^T in the GEMV's store.
    const auto res = random_floats(size_t(rows[2]), 3, -2.f, 2.f);
    float* dres = dev(res);
    backend_->matmul_add(ws[2], x, 1, dres, poisoned(rows[2]));
    auto want = reference_matmul(cpu_dequant(ws[2]), xh, rows[2], cols, 1);
    for (size_t i = 0; i < want.size(); ++i) want[i] += res[i];
    EXPECT_LT(rel_error(get(dres, rows[2]), want), tol) << dtype_name(t) << " " << cols << " add";
  }
}

INSTANTIATE_TEST_SUITE_P(AheadTypes, CudaGemvAhead, ::testing::Values(DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hearth::test
