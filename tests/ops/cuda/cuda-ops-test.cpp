// Every CUDA backend op against the CPU kernels (kernels::*): random data, odd shapes, outputs
// poisoned with NaN first, a tolerance per op. Matmul covers every weight dtype at T=1 (GEMV),
// T=3 (multi-token GEMV) and T=17 (fp16 tensor-core GEMM).
#include <gtest/gtest.h>

#include <cmath>

#include "cuda-test-util.h"
#include "kernels/cuda/cuda-ops.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                           DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K};

TEST(CudaBackendCreate, MissingDeviceIsAnErrorNotACrash) {
  Status err;
  auto none = make_cuda_backend(4096, CudaOptions{}, &err);
  EXPECT_EQ(none, nullptr);
  EXPECT_FALSE(err.is_ok());
  EXPECT_FALSE(err.message().empty());
  Status err0;
  auto first = make_cuda_backend(0, CudaOptions{}, &err0);
  // Either a backend or a one-line reason, never both and never neither.
  EXPECT_EQ(first != nullptr, err0.is_ok()) << err0.message();
}

TEST(CudaBackendCreate, OptionsOutOfRangeAreAnErrorNotACrash) {
  for (int depth : {-1, CudaOptions::kMaxGreedyChainDepth + 1}) {
    CudaOptions o;
    o.greedy_chain_depth = depth;
    Status err;
    EXPECT_EQ(make_cuda_backend(0, o, &err), nullptr) << depth;
    EXPECT_NE(err.message().find("greedy chain depth"), std::string::npos) << err.message();
  }
}

class CudaMatmul : public CudaTest,
                   public ::testing::WithParamInterface<std::tuple<DType, int64_t>> {};

TEST_P(CudaMatmul, MatchesCpuDequantizedProduct) {
  const auto [t, n_tokens] = GetParam();
  const int64_t block = dtype_info(t).block_size;
  // Odd row counts; column counts of 1..3 K-quant blocks or odd for plain types.
  // 8480 / 8488: rows of several GEMV steps (the software-pipelined decode loop, odd count).
  std::vector<int64_t> col_options = block == 256  ? std::vector<int64_t>{256, 768, 8448}
                                     : block == 32 ? std::vector<int64_t>{96, 512, 8480}
                                                   : std::vector<int64_t>{101, 512, 8488};
  for (int64_t cols : col_options) {
    const int64_t rows = 37;
    auto bytes = random_weight_bytes(t, rows, cols, uint32_t(cols + n_tokens));
    Weight w = make_weight(t, rows, cols, bytes);
    ASSERT_TRUE(backend_->prepare_weight(w).is_ok()) << backend_->status().message();
    ASSERT_TRUE(backend_->prepare_weight(w).is_ok());  // idempotent
    const auto x = random_floats(size_t(n_tokens * cols), 11);
    const auto wf = cpu_dequant(w);
    const std::vector<float> want = reference_matmul(wf, x, rows, cols, n_tokens);
    float* y = poisoned(n_tokens * rows);
    backend_->matmul(w, dev(x), n_tokens, y);
    const double err = rel_error(get(y, n_tokens * rows), want);
    // Plain GEMV accumulates in f32; quantized GEMV rounds x to int8 blocks (about 1/250 of each
    // block's range; Q8_0/Q6_K add a residual level, about 1/30000); the GEMM path rounds W and
    // X to fp16 (2^-11 each). A wrong nibble, scale or block order errs by ~100%.
    const bool two_level = t == DType::Q8_0 || t == DType::Q6_K;
    const double tol = n_tokens > 4                    ? 3e-3
                       : dtype_info(t).block_size == 1 ? 2e-5
                       : two_level                     ? 1e-4
                                                       : 1e-2;
    EXPECT_LT(err, tol) << dtype_name(t) << " " << rows << "x" << cols << " T=" << n_tokens;
  }
}

// Consecutive matmuls on one x run as one batched launch (Q/K/V): each output still matches,
// with rows of several GEMV steps (one-token GEMVs then split each row's steps over warps,
// cuda-ops.h gemv_split) and row counts that leave partial blocks.
TEST_P(CudaMatmul, BatchedOnSameXMatchesEach) {
  const auto [t, n_tokens] = GetParam();
  const int64_t cols = dtype_info(t).block_size == 256  ? 8448
                       : dtype_info(t).block_size == 32 ? 8480
                                                        : 8488;
  const int64_t rows[3] = {37, 21, 64};
  std::vector<Weight> ws;
  std::vector<std::vector<uint8_t>> keep;
  ws.reserve(3);
  keep.reserve(3);
  for (int i = 0; i < 3; ++i) {
    keep.push_back(random_weight_bytes(t, rows[i], cols, uint32_t(100 + i)));
    ws.push_back(make_weight(t, rows[i], cols, keep.back()));
    ASSERT_TRUE(backend_->prepare_weight(ws.back()).is_ok()) << backend_->status().message();
  }
  const auto xh = random_floats(size_t(n_tokens * cols), 12);
  float* x = dev(xh);
  float* ys[3];
  for (int i = 0; i < 3; ++i) ys[i] = poisoned(n_tokens * rows[i]);
  for (int i = 0; i < 3; ++i) backend_->matmul(ws[i], x, n_tokens, ys[i]);
  const bool two_level = t == DType::Q8_0 || t == DType::Q6_K;
  const double tol = n_tokens > 4                    ? 3e-3
                     : dtype_info(t).block_size == 1 ? 2e-5
                     : two_level                     ? 1e-4
                                                     : 1e-2;
  for (int i = 0; i < 3; ++i) {
    const auto want = reference_matmul(cpu_dequant(ws[i]), xh, rows[i], cols, n_tokens);
    EXPECT_LT(rel_error(get(ys[i], n_tokens * rows[i]), want), tol)
        << dtype_name(t) << " job " << i << " " << rows[i] << "x" << cols << " T=" << n_tokens;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaMatmul,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::Values(int64_t(1), int64_t(3), int64_t(17))),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_T" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The backend quantizes x once for consecutive matmuls on it (Q, K, V); an op that rewrites x
// in between must not leave the next matmul reading the stale quantization.
TEST_F(CudaTest, QuantizedXFollowsWritesBetweenMatmuls) {
  const int64_t rows = 40, cols = 256;
  auto bytes = random_weight_bytes(DType::Q4_0, rows, cols, 3);
  Weight w = make_weight(DType::Q4_0, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok());
  float* x = dev(random_floats(size_t(cols), 4));
  float* y1 = poisoned(rows);
  float* y2 = poisoned(rows);
  float* y3 = poisoned(rows);
  backend_->matmul(w, x, 1, y1);
  backend_->matmul(w, x, 1, y2);      // reuses the quantized x
  backend_->add_inplace(x, x, cols);  // x doubles: every block scale doubles, the ints stay
  backend_->matmul(w, x, 1, y3);
  const auto a = get(y1, rows), b = get(y2, rows), c = get(y3, rows);
  std::vector<float> twice(a.size());
  for (size_t i = 0; i < a.size(); ++i) twice[i] = 2 * a[i];
  EXPECT_LT(rel_error(b, a), 1e-7);
  EXPECT_LT(rel_error(c, twice), 1e-6);
}

// A one-token GEMV + residual add (fused into the GEMV's store), the rmsnorm of that residual
// and the GEMV it feeds: rows past 2048; F16 with a partial last block of 16 rows; Q4_0 with the
// rmsnorm's int8 output feeding the next GEMV. (Until 2026-12 the rmsnorm could also run in the
// GEMV's last block, an experiment that lost: docs/history/cuda.md.)
class CudaFusedNorm : public CudaTest {
 protected:
  void run_case(DType t, int64_t rows, double tol) {
    const int64_t cols = 256, rows2 = 24;
    auto bytes = random_weight_bytes(t, rows, cols, 21);
    Weight w = make_weight(t, rows, cols, bytes);
    auto bytes2 = random_weight_bytes(t, rows2, rows, 22);
    Weight w2 = make_weight(t, rows2, rows, bytes2);
    ASSERT_TRUE(backend_->prepare_weight(w).is_ok());
    ASSERT_TRUE(backend_->prepare_weight(w2).is_ok());
    const auto x = random_floats(size_t(cols), 23);
    const auto res = random_floats(size_t(rows), 24, -2.f, 2.f);
    const auto nw = random_floats(size_t(rows), 25, 0.5f, 1.5f);
    // A first GEMV over rows-wide x sizes the int8 activation buffer as a model's widest GEMV
    // would (the fused epilogue writes into it and never regrows it under a queued GEMV).
    float* warm = poisoned(rows2);
    backend_->matmul(w2, dev(random_floats(size_t(rows), 26)), 1, warm);
    float* dres = dev(res);
    float* y = poisoned(rows);
    float* normed = poisoned(rows);
    float* z = poisoned(rows2);
    const float* dx = dev(x);
    const float* dnw = dev(nw);
    backend_->begin_pass(Backend::Phase::kDecode, 1);
    backend_->matmul_add(w, dx, 1, dres, y);  // y: the product on the way
    backend_->rmsnorm(dres, dnw, normed, 1, rows, 1e-5f);
    backend_->matmul(w2, normed, 1, z);
    // CPU reference in double from the dequantized weights.
    const auto wf = cpu_dequant(w), wf2 = cpu_dequant(w2);
    std::vector<float> want_res(static_cast<size_t>(rows)), want_norm(static_cast<size_t>(rows));
    std::vector<float> want_z(static_cast<size_t>(rows2));
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t i = 0; i < cols; ++i) s += double(wf[size_t(r * cols + i)]) * x[size_t(i)];
      want_res[size_t(r)] = float(res[size_t(r)] + s);
    }
    want_norm = reference_rmsnorm(want_res, nw, 1, rows, 1e-5);
    for (int64_t r = 0; r < rows2; ++r) {
      double s = 0;
      for (int64_t i = 0; i < rows; ++i)
        s += double(wf2[size_t(r * rows + i)]) * want_norm[size_t(i)];
      want_z[size_t(r)] = float(s);
    }
    EXPECT_LT(rel_error(get(dres, rows), want_res), tol) << dtype_name(t) << " residual";
    EXPECT_LT(rel_error(get(normed, rows), want_norm), tol) << dtype_name(t) << " rmsnorm";
    EXPECT_LT(rel_error(get(z, rows2), want_z), tol) << dtype_name(t) << " next GEMV";
  }
};

TEST_F(CudaFusedNorm, F16) {
  run_case(DType::F16, 4136, 2e-5);
}

TEST_F(CudaFusedNorm, Q4_0) {
  // x rounds to int8 blocks twice (the first GEMV's x, the normed row): ~1/250 of a block each.
  run_case(DType::Q4_0, 4128, 1e-2);
}

class CudaEmbed : public CudaTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaEmbed, RowsMatchCpuDequantize) {
  const DType t = GetParam();
  const int64_t cols =
      dtype_info(t).block_size == 256 ? 512 : (dtype_info(t).block_size == 32 ? 96 : 77);
  const int64_t rows = 29;
  auto bytes = random_weight_bytes(t, rows, cols, 5);
  Weight w = make_weight(t, rows, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok());
  const std::vector<int32_t> ids = {3, 0, 28, 3, 17};
  float* out = poisoned(int64_t(ids.size()) * cols);
  backend_->embed(w, ids.data(), int64_t(ids.size()), out);
  const auto got = get(out, int64_t(ids.size()) * cols);
  const auto wf = cpu_dequant(w);
  std::vector<float> want;
  for (int32_t id : ids)
    want.insert(want.end(), wf.begin() + id * cols, wf.begin() + (id + 1) * cols);
  EXPECT_LT(rel_error(got, want), 1e-6) << dtype_name(t);
}

TEST_P(CudaEmbed, OutOfRangeIdIsAnError) {
  const DType t = GetParam();
  const int64_t cols = dtype_info(t).block_size == 256 ? 256 : 64;
  auto bytes = random_weight_bytes(t, 4, cols, 9);
  Weight w = make_weight(t, 4, cols, bytes);
  ASSERT_TRUE(backend_->prepare_weight(w).is_ok());
  const int32_t bad = 4;
  float* out = poisoned(cols);
  backend_->embed(w, &bad, 1, out);
  EXPECT_FALSE(backend_->status().is_ok());
  backend_.reset();  // the expected error must not fail TearDown
  owned_.clear();
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaEmbed, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Preloading (kernels/cuda/kernel-modules.cuh) finds every .cu file's module and loads each
// kernel once: a second call has nothing left to load, and kernels still launch afterwards.
TEST_F(CudaTest, KernelModulesPreloadEveryKernelOnce) {
  cuda::KernelPreload first, again;
  const cudaError_t e = cuda::preload_kernel_modules(&first);
  if (e == cudaErrorNotSupported) GTEST_SKIP() << "the driver predates CUDA 12.4's cuFuncLoad";
  ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  EXPECT_GE(first.modules, 20);  // (24 .cu files with kernels; a few may not be linked in)
  EXPECT_GT(first.functions, 10 * first.modules);
  EXPECT_LE(first.loaded, first.functions);
  ASSERT_EQ(cuda::preload_kernel_modules(&again), cudaSuccess);
  EXPECT_EQ(again.modules, first.modules);
  EXPECT_EQ(again.functions, first.functions);
  EXPECT_EQ(again.loaded, 0);
  const auto x = random_floats(64, 3), w = random_floats(64, 4);
  std::vector<float> want(x.size());
  kernels::rmsnorm(x.data(), w.data(), want.data(), 1, 64, 1e-5f);
  float* y = poisoned(64);
  backend_->rmsnorm(dev(x), dev(w), y, 1, 64, 1e-5f);
  EXPECT_LT(rel_error(get(y, 64), want), 1e-6);
}

TEST_F(CudaTest, UnsupportedWeightIsAnError) {
  std::vector<uint8_t> bytes(84 * 2);
  Weight w = make_weight(DType::Q2_K, 2, 256, bytes);
  EXPECT_FALSE(backend_->prepare_weight(w).is_ok());
  std::vector<uint8_t> short_bytes(10);
  Weight w2 = make_weight(DType::Q4_0, 2, 64, short_bytes);
  EXPECT_FALSE(backend_->prepare_weight(w2).is_ok());
}

TEST_F(CudaTest, RmsnormMatchesCpu) {
  const int64_t rows = 3, n = 4097;
  const auto x = random_floats(size_t(rows * n), 1, -3.f, 3.f), w = random_floats(size_t(n), 2);
  std::vector<float> want(x.size());
  kernels::rmsnorm(x.data(), w.data(), want.data(), rows, n, 1e-5f);
  float* y = poisoned(rows * n);
  backend_->rmsnorm(dev(x), dev(w), y, rows, n, 1e-5f);
  EXPECT_LT(rel_error(get(y, rows * n), want), 1e-6);
}

TEST_F(CudaTest, RopeMatchesCpuBothLayouts) {
  for (auto style : {kernels::RopeStyle::kInterleaved, kernels::RopeStyle::kHalves}) {
    for (int64_t hd : {32, 64, 128}) {
      const int64_t T = 5, heads = 3;
      auto x = random_floats(size_t(T * heads * hd), 3);
      std::vector<float> inv(size_t(hd / 2));
      for (int64_t i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / hd));
      const std::vector<int32_t> pos = {0, 1, 77, 4095, 5000};
      float* d = dev(x);
      backend_->rope(d, T, heads, hd, pos.data(), inv.data(), style);
      kernels::rope(x.data(), T, heads, hd, pos.data(), inv.data(), style);
      EXPECT_LT(rel_error(get(d, T * heads * hd), x), 1e-6) << "hd " << hd;
    }
  }
}

struct AttnCase {
  int64_t T, pos0, heads, kv_heads, hd;
};

TEST_F(CudaTest, AttentionMatchesCpu) {
  ThreadPool pool(2);
  const AttnCase cases[] = {
      {1, 0, 4, 2, 64},   {1, 700, 4, 2, 64}, {1, 1300, 8, 8, 128}, {3, 257, 4, 1, 32},
      {37, 0, 4, 4, 128}, {20, 45, 4, 2, 64}, {9, 300, 2, 2, 80},   {64, 100, 3, 3, 32},
      {2, 10, 2, 1, 256}, {40, 3, 2, 1, 256},
  };
  for (const auto& c : cases) {
    const int64_t ctx = c.pos0 + c.T;
    const auto q = random_floats(size_t(c.T * c.heads * c.hd), 4, -2.f, 2.f);
    const auto k = random_floats(size_t(ctx * c.kv_heads * c.hd), 5, -2.f, 2.f);
    const auto v = random_floats(size_t(ctx * c.kv_heads * c.hd), 6);
    const float scale = 1.f / std::sqrt(float(c.hd));
    std::vector<float> want(q.size());
    kernels::attention(q.data(), k.data(), v.data(), want.data(), c.T, c.pos0, c.heads, c.kv_heads,
                       c.hd, scale, pool);
    float* out = poisoned(int64_t(q.size()));
    backend_->attention(dev(q), dev(k), dev(v), out, c.T, c.pos0, c.heads, c.kv_heads, c.hd, scale);
    EXPECT_LT(rel_error(get(out, int64_t(q.size())), want), 2e-5)
        << "T " << c.T << " pos0 " << c.pos0 << " hd " << c.hd;
  }
}

TEST_F(CudaTest, ElementwiseMatchCpu) {
  const int64_t rows = 7, n = 1001;
  const auto a = random_floats(size_t(rows * n), 7, -6.f, 6.f),
             b = random_floats(size_t(rows * n), 8);
  const auto bias = random_floats(size_t(n), 9);
  std::vector<float> want(a.size());
  kernels::swiglu(a.data(), b.data(), want.data(), rows * n);
  float* out = poisoned(rows * n);
  backend_->swiglu(dev(a), dev(b), out, rows * n);
  EXPECT_LT(rel_error(get(out, rows * n), want), 1e-6);

  std::vector<float> y = a;
  kernels::add_inplace(y.data(), b.data(), rows * n);
  float* dy = dev(a);
  backend_->add_inplace(dy, dev(b), rows * n);
  EXPECT_LT(rel_error(get(dy, rows * n), y), 1e-7);

  kernels::add_bias(y.data(), bias.data(), rows, n);
  backend_->add_bias(dy, dev(bias), rows, n);
  EXPECT_LT(rel_error(get(dy, rows * n), y), 1e-7);
}

// launch_param_table (the backend's small uploads outside a capture): the host bytes land in
// stream order after what the stream wrote there before, whole 16-byte words (a partial last
// word's tail zeroed); a table over the parameter space or a dst off 16 bytes is refused.
TEST_F(CudaTest, ParamTableWritesTheHostBytesInStreamOrder) {
  void* dst = nullptr;
  ASSERT_EQ(cudaMalloc(&dst, 4096), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  constexpr size_t kMax = sizeof(cuda::ParamTable::words);
  std::vector<uint8_t> host(kMax);
  for (size_t i = 0; i < kMax; ++i) host[i] = uint8_t(i * 7 + 3);
  for (size_t bytes : {size_t(5), size_t(24), size_t(1000), kMax}) {
    ASSERT_EQ(cudaMemsetAsync(dst, 0xAB, 4096, s), cudaSuccess);
    ASSERT_EQ(cuda::launch_param_table(host.data(), bytes, dst, s), cudaSuccess) << bytes;
    std::vector<uint8_t> got(4096);
    ASSERT_EQ(cudaMemcpyAsync(got.data(), dst, 4096, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const size_t words = (bytes + 15) / 16 * 16;
    for (size_t i = 0; i < 4096; ++i) {
      const uint8_t want = i < bytes ? host[i] : i < words ? 0 : 0xAB;
      ASSERT_EQ(got[i], want) << "byte " << i << " of a " << bytes << "-byte table";
    }
  }
  EXPECT_EQ(cuda::launch_param_table(host.data(), kMax + 1, dst, s), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_param_table(host.data(), 16, static_cast<uint8_t*>(dst) + 4, s),
            cudaErrorInvalidValue);
  cudaStreamDestroy(s);
  cudaFree(dst);
}

TEST_F(CudaTest, PrepareVectorConvertsFloatTypes) {
  std::vector<uint16_t> h = {f32_to_bf16(1.5f), f32_to_bf16(-2.25f), f32_to_bf16(0.125f)};
  TensorView v;
  v.name = "norm";
  v.dtype = DType::BF16;
  v.shape = {3};
  v.data = h.data();
  v.nbytes = 6;
  auto r = backend_->prepare_vector(v);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(get(*r, 3), (std::vector<float>{1.5f, -2.25f, 0.125f}));
}

}  // namespace
}  // namespace hearth::test
