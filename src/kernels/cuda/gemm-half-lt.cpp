// gemm-half-lt.h: cuBLASLt plans for the fp16 prefill GEMMs, an algorithm per (handle, shape,
// token bucket) and descriptors per exact token count.
#include "kernels/cuda/gemm-half-lt.h"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/lt-heuristic.h"

namespace hearth::cuda {

namespace {

struct HalfAlgo {  // one per (handle, rows, cols, bucket)
  void* handle = nullptr;
  int64_t rows = 0, cols = 0, bucket = 0;
  cublasLtMatmulAlgo_t algo = {};
  bool ok = false;
};
struct HalfPlan {  // one per (handle, rows, cols, n_tokens)
  void* handle = nullptr;
  int64_t rows = 0, cols = 0, n_tokens = 0;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  const HalfAlgo* algo = nullptr;
  bool ok = false;
};
// Keyed by (handle, rows, cols, bucket or token count): a server meets hundreds of counts, and
// every prefill GEMM looks its plan up. (Map nodes keep their addresses as entries are added.)
using Key = std::tuple<void*, int64_t, int64_t, int64_t>;
std::mutex g_mu;
std::map<Key, HalfAlgo> g_algos;
std::map<Key, HalfPlan> g_plans;

// The descriptors of y = op_T(W^T col-major, cols x rows) . X (cols x T), as matmul.cu's view.
cublasStatus_t describe(HalfPlan& p) {
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16F, uint64_t(p.cols), uint64_t(p.rows), p.cols);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16F, uint64_t(p.cols), uint64_t(p.n_tokens),
                                    p.cols);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_32F, uint64_t(p.rows), uint64_t(p.n_tokens),
                                    p.rows);
  return st;
}

// The heuristic's first algorithm for the bucket's largest token count.
void choose(HalfAlgo& a) {
  HalfPlan probe;
  probe.handle = a.handle, probe.rows = a.rows, probe.cols = a.cols, probe.n_tokens = a.bucket;
  cublasStatus_t st = describe(probe);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt_first_algo(reinterpret_cast<cublasLtHandle_t>(a.handle), probe.op, probe.la, probe.lb,
                       probe.lc, kGemmHalfLtWorkspace, &a.algo);
  a.ok = st == CUBLAS_STATUS_SUCCESS;
  // (the probe's descriptors are a few hundred bytes, kept for the process like the plans')
}

const HalfPlan& plan_for(void* handle, int64_t rows, int64_t cols, int64_t n_tokens) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto it = g_plans.find({handle, rows, cols, n_tokens}); it != g_plans.end())
    return it->second;
  const int64_t bucket = gemm_half_bucket(n_tokens);
  auto [at, added] = g_algos.try_emplace({handle, rows, cols, bucket});
  HalfAlgo& a = at->second;
  if (added) {
    a.handle = handle, a.rows = rows, a.cols = cols, a.bucket = bucket;
    choose(a);
  }
  HalfPlan& p = g_plans[{handle, rows, cols, n_tokens}];
  p.handle = handle, p.rows = rows, p.cols = cols, p.n_tokens = n_tokens, p.algo = &a;
  p.ok = a.ok && describe(p) == CUBLAS_STATUS_SUCCESS;
  return p;
}

}  // namespace

int64_t gemm_half_bucket(int64_t n_tokens) {
  int64_t b = 128;
  while (b < n_tokens) b *= 2;
  return b;
}

cudaError_t gemm_half_lt(cublasHandle_t blas, const __half* w16, const __half* x16, float* y,
                         int64_t rows, int64_t cols, int64_t n_tokens, float beta, void* workspace,
                         size_t workspace_bytes, cudaStream_t s) {
  if (rows <= 0 || cols <= 0 || n_tokens <= 0) return cudaErrorInvalidValue;
  // A cuBLAS handle wraps a cuBLASLt one and may be used as such (cuBLAS documentation).
  const HalfPlan& p = plan_for(static_cast<void*>(blas), rows, cols, n_tokens);
  if (!p.ok) return cudaErrorNotSupported;
  const float alpha = 1.f;
  const cublasStatus_t st = cublasLtMatmul(
      reinterpret_cast<cublasLtHandle_t>(p.handle), p.op, &alpha, w16, p.la, x16, p.lb, &beta, y,
      p.lc, y, p.lc, &p.algo->algo, workspace_bytes >= kGemmHalfLtWorkspace ? workspace : nullptr,
      workspace_bytes >= kGemmHalfLtWorkspace ? kGemmHalfLtWorkspace : 0, s);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
    return cudaErrorNotSupported;  // (this count does not fit the bucket's algorithm)
  return st == CUBLAS_STATUS_SUCCESS ? cudaGetLastError() : cudaErrorUnknown;
}

}  // namespace hearth::cuda
