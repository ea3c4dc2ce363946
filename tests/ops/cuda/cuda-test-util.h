// Helpers for the CUDA op tests: a backend fixture (default CudaOptions unless a test overrides
// options(); skips without a GPU unless HEARTH_REQUIRE_GPU=1), device buffers with NaN
// poisoning, and error norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda-backend.h"
#include "kernels/ops.h"

namespace hearth::test {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status err;
    backend_ = make_cuda_backend(0, options(), &err);
    if (!backend_) {
      const char* req = std::getenv("HEARTH_REQUIRE_GPU");
      if (req && std::string(req) == "1") FAIL() << "no GPU: " << err.message();
      GTEST_SKIP() << "no CUDA device (" << err.message() << ")";
    }
  }
  virtual CudaOptions options() const { return {}; }
  void TearDown() override {
    if (backend_) {
      EXPECT_TRUE(backend_->status().is_ok()) << backend_->status().message();
    }
  }

  // A device buffer filled from host data.
  float* dev(const std::vector<float>& host) {
    float* p = backend_->alloc(int64_t(host.size()));
    backend_->upload(p, host.data(), int64_t(host.size()));
    owned_.push_back(p);
    return p;
  }
  // A device buffer of n NaNs, so unwritten outputs show.
  float* poisoned(int64_t n) {
    return dev(std::vector<float>(size_t(n), std::numeric_limits<float>::quiet_NaN()));
  }
  std::vector<float> get(const float* p, int64_t n) {
    std::vector<float> h(static_cast<size_t>(n));
    backend_->download(h.data(), p, n);
    return h;
  }
  ~CudaTest() override {
    if (backend_)
      for (float* p : owned_) backend_->free(p);
  }

  std::unique_ptr<Backend> backend_;
  std::vector<float*> owned_;
};

// A CUDA backend that runs every op as its own launch (CudaOptions::fuse off): the same kernels
// and arithmetic as the fused forms, so those must match it to rounding. Fails the test (null)
// when it cannot be made.
inline std::unique_ptr<Backend> make_unfused_cuda_backend() {
  CudaOptions unfused;
  unfused.fuse = false;
  Status err;
  auto plain = make_cuda_backend(0, unfused, &err);
  EXPECT_TRUE(plain) << err.message();
  return plain;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Floats that hold `bytes` (KV cache rows of any type live in float vectors, as Backend moves
// them).
inline int64_t floats_for(int64_t bytes) {
  return (bytes + 3) / 4;
}

// KV cache rows [rows, n] of type t (held in floats, as Backend moves them) back to f32 (the
// CPU's load_kv_row).
inline std::vector<float> widen_kv_rows(DType t, const std::vector<float>& bytes, int64_t rows,
                                        int64_t n) {
  std::vector<float> out(size_t(rows * n));
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  for (int64_t r = 0; r < rows; ++r)
    kernels::load_kv_row(t, p + r * kernels::kv_row_bytes(t, n), out.data() + r * n, n);
  return out;
}

// ||got - want|| / ||want||; infinite when any element of got is not finite.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// Y [n_tokens, rows] = X [n_tokens, cols] W^T in float64 (W given dequantized, [rows, cols]):
// the reference every CUDA matmul test compares against.
inline std::vector<float> reference_matmul(const std::vector<float>& w, const std::vector<float>& x,
                                           int64_t rows, int64_t cols, int64_t n_tokens) {
  std::vector<float> y(size_t(n_tokens * rows));
  for (int64_t tk = 0; tk < n_tokens; ++tk)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t i = 0; i < cols; ++i)
        s += double(w[size_t(r * cols + i)]) * x[size_t(tk * cols + i)];
      y[size_t(tk * rows + r)] = float(s);
    }
  return y;
}

// Each of x's rows [rows, n] over its rms, times w [n], in float64: the reference every norm
// test compares against.
inline std::vector<float> reference_rmsnorm(const std::vector<float>& x,
                                            const std::vector<float>& w, int64_t rows, int64_t n,
                                            double eps) {
  std::vector<float> y(size_t(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
    const double s = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i)
      y[size_t(r * n + i)] = float(x[size_t(r * n + i)] * s * w[size_t(i)]);
  }
  return y;
}

// A host Weight over `bytes` (kept alive by the caller), named after its dtype.
inline Weight make_weight(DType t, int64_t rows, int64_t cols, std::vector<uint8_t>& bytes) {
  Weight w;
  w.host.name = std::string("w.") + dtype_name(t);
  w.host.dtype = t;
  w.host.shape = {rows, cols};
  w.host.data = bytes.data();
  w.host.nbytes = bytes.size();
  return w;
}

// Rows dequantized by the CPU kernels: the reference decode of every dtype.
inline std::vector<float> cpu_dequant(const Weight& w) {
  const int64_t rows = w.host.rows(), cols = w.host.cols();
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    kernels::dequantize_row(w.host.dtype, w.host.row(r), out.data() + r * cols, cols);
  return out;
}

}  // namespace hearth::test
