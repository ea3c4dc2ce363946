// The sandwich norms' fused step (post-norm.cu) and the GELU gate's int8 epilogue against the
// separate launches they replace, bit for bit: x, xn, and xn's int8 or fp16 form; and the
// backend's post_norm_add in decode and batch passes against the unfused backend and the CPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>

#include "cuda-test-util.h"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/decode-batch.h"
#include "random-weights.h"

namespace hearth::test {
namespace {

// A raw device buffer (quantized activations, fp16 copies), freed with the test.
struct DeviceBytes {
  void* p = nullptr;
  size_t n = 0;
  explicit DeviceBytes(size_t bytes) : n(bytes) {
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0xA5, bytes), cudaSuccess);  // unwritten bytes differ between runs
  }
  ~DeviceBytes() { cudaFree(p); }
  std::vector<uint8_t> get() const {
    std::vector<uint8_t> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

enum class Form { kPlain, kInt8, kHalf, kNoNext };

struct PostNormCase {
  int64_t rows, n;
  Form form;
};

std::string case_name(const PostNormCase& c) {
  const char* form = c.form == Form::kPlain  ? "plain"
                     : c.form == Form::kInt8 ? "int8"
                     : c.form == Form::kHalf ? "half"
                                             : "no_next";
  return std::to_string(c.rows) + "x" + std::to_string(c.n) + "_" + form;
}

class CudaPostNormTest : public CudaTest, public ::testing::WithParamInterface<PostNormCase> {};

// The reference is what the backend ran before: the post-norm in place (one block a row, the
// vectorised sum: launch_rmsnorm_quant's in-place form), the add, then the next norm's decode
// form (launch_rmsnorm_quant, or launch_rmsnorm's sliced kernel with the fp16 copy or plain).
TEST_P(CudaPostNormTest, MatchesSeparateLaunchesBitForBit) {
  const auto [rows, n, form] = GetParam();
  const int64_t e = rows * n;
  const float eps = 1e-6f;
  const std::vector<float> y0 = random_floats(size_t(e), 1, -3.f, 3.f);
  const std::vector<float> x0 = random_floats(size_t(e), 2, -20.f, 20.f);
  const std::vector<float> wp = random_floats(size_t(n), 3, 0.2f, 1.8f);
  const std::vector<float> wn = random_floats(size_t(n), 4, 0.2f, 1.8f);
  const bool next = form != Form::kNoNext;
  const size_t qbytes = cuda::quantized_acts_bytes(rows, n);
  const size_t hbytes = cuda::batch_x_half_bytes(rows, n);

  // Fused: xn is y, as forward.cpp calls it.
  float* y = dev(y0);
  float* x = dev(x0);
  float* d_wp = dev(wp);
  float* d_wn = dev(wn);
  DeviceBytes q(qbytes), h(hbytes);
  ASSERT_EQ(cuda::launch_post_norm_add(y, d_wp, x, rows, n, eps, next ? d_wn : nullptr, y,
                                       form == Form::kInt8 ? q.p : nullptr,
                                       form == Form::kHalf ? h.p : nullptr, nullptr),
            cudaSuccess);

  float* ry = dev(y0);
  float* rx = dev(x0);
  float* rxn = poisoned(e);
  DeviceBytes rq(qbytes), rh(hbytes), scratch(qbytes);
  ASSERT_EQ(cuda::launch_rmsnorm_quant(ry, d_wp, ry, rows, n, eps, scratch.p, nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::launch_add_inplace(rx, ry, e, nullptr), cudaSuccess);
  cudaError_t err = cudaSuccess;
  if (form == Form::kInt8)
    err = cuda::launch_rmsnorm_quant(rx, d_wn, rxn, rows, n, eps, rq.p, nullptr);
  else if (form == Form::kHalf)
    err = cuda::launch_rmsnorm(rx, d_wn, rxn, rows, n, eps, nullptr, nullptr, rh.p);
  else if (form == Form::kPlain)
    err = cuda::launch_rmsnorm(rx, d_wn, rxn, rows, n, eps, nullptr);
  ASSERT_EQ(err, cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  EXPECT_TRUE(same_bits(get(x, e), get(rx, e))) << "x";
  if (next) {
    EXPECT_TRUE(same_bits(get(y, e), get(rxn, e))) << "xn";
  }
  if (form == Form::kInt8) {
    EXPECT_EQ(q.get(), rq.get()) << "int8 form";
  }
  if (form == Form::kHalf) {
    EXPECT_EQ(h.get(), rh.get()) << "fp16 form";
  }
  // And the sum it stands for, in double: x += y / rms(y) * w_post.
  const std::vector<float> got = get(x, e);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(y0[size_t(r * n + i)]) * y0[size_t(r * n + i)];
    const double s = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = size_t(r * n + i);
      const double want = x0[k] + y0[k] * s * wp[size_t(i)];
      ASSERT_NEAR(got[k], want, 1e-5 * (1 + std::fabs(want))) << "row " << r << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaPostNormTest,
    ::testing::Values(PostNormCase{1, 3584, Form::kInt8},  // gemma2-9b decode
                      PostNormCase{1, 2304, Form::kInt8},  // gemma2-2b
                      PostNormCase{3, 4608, Form::kInt8},  // gemma2-27b: two passes
                      PostNormCase{1, 5376, Form::kInt8},  // gemma3-27b
                      PostNormCase{2, 8192, Form::kInt8},  // the largest row it takes
                      PostNormCase{1, 96, Form::kInt8},    // a warp part in, part out
                      PostNormCase{1, 128, Form::kPlain}, PostNormCase{4, 3584, Form::kPlain},
                      PostNormCase{8, 3584, Form::kHalf}, PostNormCase{32, 2304, Form::kHalf},
                      PostNormCase{1, 3584, Form::kNoNext}, PostNormCase{5, 4608, Form::kNoNext}),
    [](const auto& info) { return case_name(info.param); });

TEST_F(CudaTest, PostNormAddRefusesRowsItCannotHold) {
  float* p = poisoned(2 * 8224);
  EXPECT_FALSE(cuda::post_norm_add_fits(8224));
  EXPECT_FALSE(cuda::post_norm_add_fits(100));
  EXPECT_EQ(cuda::launch_post_norm_add(p, p, p + 8224, 1, 8224, 1e-6f, nullptr, nullptr, nullptr,
                                       nullptr, nullptr),
            cudaErrorInvalidValue);
  // A quantized or fp16 form needs the next norm it would be the form of.
  DeviceBytes q(cuda::quantized_acts_bytes(1, 128));
  EXPECT_EQ(cuda::launch_post_norm_add(p, p, p + 128, 1, 128, 1e-6f, nullptr, nullptr, q.p, nullptr,
                                       nullptr),
            cudaErrorInvalidValue);
}

TEST_F(CudaTest, GeluGateQuantMatchesGeluThenQuantize) {
  const int64_t n = 14336;
  const std::vector<float> g0 = random_floats(size_t(n), 5, -4.f, 4.f);
  const std::vector<float> u0 = random_floats(size_t(n), 6, -2.f, 2.f);
  float* g = dev(g0);
  float* u = dev(u0);
  float* rg = dev(g0);
  DeviceBytes q(cuda::quantized_acts_bytes(1, n)), rq(cuda::quantized_acts_bytes(1, n));
  ASSERT_EQ(cuda::launch_gelu_tanh_gated_quant(g, u, g, 1, n, q.p, nullptr), cudaSuccess);
  ASSERT_EQ(cuda::launch_gelu_tanh_gated(rg, u, rg, n, nullptr), cudaSuccess);
  cuda::QuantizedActs view;
  ASSERT_EQ(cuda::launch_quantize_acts(rg, 1, n, rq.p, &view, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(same_bits(get(g, n), get(rg, n)));
  EXPECT_EQ(q.get(), rq.get());
}

// The backend op as forward.cpp runs it: decode (one row: int8 form) and batch passes (8 rows:
// the int8 batched matmul's x; 32: the fp16 one), against the unfused backend (the same
// launches one by one: bit for bit on one row) and the CPU's three ops.
TEST_F(CudaTest, PostNormAddOpMatchesUnfusedBackendAndCpu) {
  auto cpu = make_cpu_backend(1);
  auto plain = make_unfused_cuda_backend();
  ASSERT_TRUE(plain);
  const int64_t n = 2304;
  // A quantized weight makes the CUDA backends hand the next matmul its int8 / fp16 x.
  const std::vector<uint8_t> wbytes = random_weight_bytes(DType::Q8_0, 32, n, 11);
  Weight w8[2];
  for (int b = 0; b < 2; ++b) {
    w8[b].host = TensorView{"w8", DType::Q8_0, {32, n}, wbytes.data(), wbytes.size()};
    ASSERT_TRUE((b == 0 ? backend_ : plain)->prepare_weight(w8[b]).is_ok());
  }
  for (int64_t rows : {1, 8, 32}) {
    const int64_t e = rows * n;
    const std::vector<float> y0 = random_floats(size_t(e), 7, -3.f, 3.f);
    const std::vector<float> x0 = random_floats(size_t(e), 8, -20.f, 20.f);
    const std::vector<float> wp = random_floats(size_t(n), 9, 0.2f, 1.8f);
    const std::vector<float> wn = random_floats(size_t(n), 10, 0.2f, 1.8f);
    std::vector<float> xs[3], xns[3];
    Backend* bes[3] = {backend_.get(), plain.get(), cpu.get()};
    for (int b = 0; b < 3; ++b) {
      Backend& be = *bes[b];
      float* y = be.alloc(e);
      float* x = be.alloc(e);
      be.upload(y, y0.data(), e);
      be.upload(x, x0.data(), e);
      TensorView wv{"w", DType::F32, {n}, wp.data(), size_t(n) * 4};
      TensorView nv{"w", DType::F32, {n}, wn.data(), size_t(n) * 4};
      const float* d_wp = be.prepare_vector(wv).value();
      const float* d_wn = be.prepare_vector(nv).value();
      be.begin_pass(rows == 1 ? Backend::Phase::kDecode : Backend::Phase::kDecodeBatch, rows);
      be.post_norm_add(y, d_wp, x, rows, n, 1e-6f, d_wn, y);
      xs[b].resize(size_t(e));
      xns[b].resize(size_t(e));
      be.download(xs[b].data(), x, e);
      be.download(xns[b].data(), y, e);
      ASSERT_TRUE(be.status().is_ok()) << be.status().message();
      be.free(y);
      be.free(x);
    }
    if (rows == 1) {
      EXPECT_TRUE(same_bits(xs[0], xs[1])) << "x vs unfused";
      EXPECT_TRUE(same_bits(xns[0], xns[1])) << "xn vs unfused";
    } else {  // (the unfused batch rows sum each row in another order)
      EXPECT_LT(rel_error(xs[0], xs[1]), 1e-6) << rows << " rows: x vs unfused";
      EXPECT_LT(rel_error(xns[0], xns[1]), 1e-6) << rows << " rows: xn vs unfused";
    }
    EXPECT_LT(rel_error(xs[0], xs[2]), 1e-5) << rows << " rows: x vs CPU";
    EXPECT_LT(rel_error(xns[0], xns[2]), 1e-5) << rows << " rows: xn vs CPU";
  }
}

}  // namespace
}  // namespace hearth::test
