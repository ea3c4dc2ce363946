// The CPU backend: host memory, ops forwarded to kernels/ with one persistent thread pool.
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "backend/backend.h"
#include "base/half.h"

namespace hearth {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads) {}
  ~CpuBackend() override {
    for (float* p : vectors_) std::free(p);
  }

  std::string name() const override { return "cpu"; }

  float* alloc(int64_t n) override {
    // 64-byte aligned so SIMD kernels can use aligned loads on activations.
    const size_t bytes = (size_t(n) * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes ? bytes : 64);
    if (!p) throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void free(float* p) override { std::free(p); }
  void upload(float* dst, const float* src, int64_t n) override {
    std::memcpy(dst, src, size_t(n) * 4);
  }
  void download(float* dst, const float* src, int64_t n) override {
    std::memcpy(dst, src, size_t(n) * 4);
  }
  void copy(float* dst, const float* src, int64_t n) override {
    std::memmove(dst, src, size_t(n) * 4);
  }

  Status prepare_weight(Weight&) override { return Status::ok(); }

  Result<float*> prepare_vector(const TensorView& v) override {
    const int64_t n = v.numel();
    if (n <= 0) return Status::error(v.name + ": empty vector");
    float* out = alloc(n);
    vectors_.push_back(out);
    kernels::dequantize_row(v.dtype, v.data, out, n);
    return out;
  }

  void embed(const Weight& table, const int32_t* ids, int64_t T, float* out) override {
    const int64_t n = table.host.cols();
    for (int64_t t = 0; t < T; ++t)
      kernels::dequantize_row(table.host.dtype, table.host.row(ids[t]), out + t * n, n);
  }
  void matmul(const Weight& w, const float* x, int64_t T, float* y) override {
    kernels::matmul(w.host, x, T, y, pool_);
  }
  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
               float eps) override {
    kernels::rmsnorm(x, w, y, rows, n, eps);
  }
  void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const float* inv_freq, kernels::RopeStyle style) override {
    kernels::rope(x, T, n_heads, head_dim, pos, inv_freq, style);
  }
  void attention(const float* q, const float* k, const float* v, float* out, int64_t T,
                 int64_t pos0, int64_t n_heads, int64_t n_kv, int64_t hd, float scale) override {
    kernels::attention(q, k, v, out, T, pos0, n_heads, n_kv, hd, scale, pool_);
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    kernels::swiglu(gate, up, out, n);
  }
  void add_inplace(float* y, const float* x, int64_t n) override { kernels::add_inplace(y, x, n); }
  void add_bias(float* y, const float* b, int64_t rows, int64_t n) override {
    kernels::add_bias(y, b, rows, n);
  }

 private:
  ThreadPool pool_;
  std::vector<float*> vectors_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return std::make_unique<CpuBackend>(n_threads);
}

}  // namespace hearth
