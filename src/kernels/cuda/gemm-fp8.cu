// FP8 correction pass of F16/BF16 prefill GEMMs: y = W.x_hi (fp16, matmul.cu) + W8.x_lo8 (FP8
// through cuBLASLt, here): W8 e4m3 at a per-tensor scale (amax / 448), x_lo8 e5m2 at a fixed
// scale. Why it is accurate: x_lo is ~2^-12 of x, so FP8's 2^-4 (e4m3) or 2^-3 (e5m2) relative
// error costs ~2^-15 of y. See gemm-fp8.h.
#include "kernels/cuda/gemm-fp8.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <type_traits>

#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/lt-heuristic.h"
#include "kernels/cuda/warp-reduce.cuh"
#include "kernels/cuda/x-split.cuh"

namespace hearth::cuda {

namespace {

constexpr float kE4m3Max = 448.f;

// Block-wide max of non-negative v, then one atomic per block (a few hundred on one address;
// one per warp was tens of thousands, serialised at L2). blockDim.x == 256.
__device__ __forceinline__ void block_max_to(float* dst, float v) {
  __shared__ float warp_maxes[8];
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) warp_maxes[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = warp_maxes[0];
    for (int w = 1; w < 8; ++w) m = fmaxf(m, warp_maxes[w]);
    // Non-negative floats order like their bit patterns as unsigned integers.
    atomicMax(reinterpret_cast<unsigned*>(dst), __float_as_uint(m));
  }
}

template <class T>
__device__ __forceinline__ float to_f(T v) {
  if constexpr (sizeof(T) == 2 && std::is_same_v<T, __half>)
    return __half2float(v);
  else
    return __bfloat162float(v);
}

template <class T>
__global__ void amax_w_kernel(const T* x, int64_t n, float* amax) {
  float m = 0.f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(to_f(x[i])));
  block_max_to(amax, m);
}

// scale_out = amax / 448 (1 when amax is 0, so the zero tensor stays zero).
__device__ __forceinline__ float fp8_scale(const float* amax) {
  return *amax > 0.f ? *amax / kE4m3Max : 1.f;
}

// Reads the amax only: the scale itself is written by one thread after every block is done
// (finish_scale_kernel), since the blocks here still read *amax.
template <class T>
__global__ void w_to_e4m3_kernel(const T* w, int64_t n, const float* amax, uint8_t* out) {
  const float inv = 1.f / fp8_scale(amax);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __nv_cvt_float_to_fp8(to_f(w[i]) * inv, __NV_SATFINITE, __NV_E4M3);
}

__global__ void finish_scale_kernel(const float* amax, float* scale_out) {
  *scale_out = fp8_scale(amax);
}

// x_lo in e5m2 at the fixed scale 2^-kLoE5m2Shift (x-split.cuh): one pass, no amax.
// 8 values a thread: two 16-byte loads of x, one 16-byte store of hi, one 8-byte store of lo.
// x, hi, lo 16-byte aligned, n % 8 == 0 (split_e5m2_scalar_kernel otherwise).
__global__ void split_e5m2_vec8_kernel(const float4* x, int64_t n8, uint4* hi, uint2* lo8,
                                       float* scale_out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = kLoE5m2Scale;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 a = x[2 * i], b = x[2 * i + 1];
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    __align__(16) __half h[8];
    __align__(8) __nv_fp8_storage_t l[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) split_one(v[k], h[k], l[k]);
    hi[i] = *reinterpret_cast<const uint4*>(h);
    lo8[i] = *reinterpret_cast<const uint2*>(l);
  }
}

__global__ void split_e5m2_scalar_kernel(const float* x, int64_t n, __half* hi, uint8_t* lo8,
                                         float* scale_out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = kLoE5m2Scale;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    __nv_fp8_storage_t l;
    split_one(x[i], hi[i], l);
    lo8[i] = l;
  }
}

__global__ void hash_fill_kernel(float* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9e3779b9u ^ seed;
    h ^= h >> 16, h *= 0x85ebca6bu, h ^= h >> 13, h *= 0xc2b2ae35u, h ^= h >> 16;
    p[i] = lo + (hi - lo) * float(h >> 8) * (1.f / 16777216.f);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return unsigned(b < 4096 ? (b > 0 ? b : 1) : 4096);
}
// Reductions: a few blocks per SM, grid-stride (fewer atomics on the amax).
unsigned reduce_grid(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return unsigned(b < 528 ? (b > 0 ? b : 1) : 528);
}

}  // namespace

namespace {
std::atomic<bool> g_fp8_failed{false};
}
bool gemm_fp8_working() {
  return !g_fp8_failed.load();
}
void gemm_fp8_mark_failed() {
  g_fp8_failed.store(true);
}

size_t weight_e4m3_bytes(DType t, int64_t rows, int64_t cols) {
  if ((t != DType::F16 && t != DType::BF16) || rows <= 0 || cols <= 0 || rows % 16 != 0 ||
      cols % 16 != 0)
    return 0;
  return (size_t(rows) * size_t(cols) + 255) / 256 * 256 + 256;
}

cudaError_t launch_weight_to_e4m3(DType t, const void* w, int64_t rows, int64_t cols, void* buf,
                                  const float** scale_out, cudaStream_t s) {
  const size_t bytes = weight_e4m3_bytes(t, rows, cols);
  if (bytes == 0) return cudaErrorInvalidValue;
  const int64_t n = rows * cols;
  auto* out = static_cast<uint8_t*>(buf);
  auto* scale = reinterpret_cast<float*>(out + bytes - 256);
  float* amax = scale + 1;
  if (cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), s); e != cudaSuccess) return e;
  if (t == DType::F16) {
    amax_w_kernel<<<reduce_grid(n), 256, 0, s>>>(static_cast<const __half*>(w), n, amax);
    w_to_e4m3_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<const __half*>(w), n, amax, out);
  } else {
    const auto* wb = static_cast<const __nv_bfloat16*>(w);
    amax_w_kernel<<<reduce_grid(n), 256, 0, s>>>(wb, n, amax);
    w_to_e4m3_kernel<<<grid_for(n), 256, 0, s>>>(wb, n, amax, out);
  }
  finish_scale_kernel<<<1, 1, 0, s>>>(amax, scale);
  *scale_out = scale;
  return cudaGetLastError();
}

cudaError_t launch_split_x_fp8(const float* x, int64_t n, void* hi16, uint8_t* lo8,
                               float* scale_dev, cudaStream_t s) {
  const bool vec =
      n % 8 == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(hi16) |
                      reinterpret_cast<uintptr_t>(lo8)) &
                     15) == 0;
  if (vec)
    split_e5m2_vec8_kernel<<<grid_for(n / 8), 256, 0, s>>>(
        reinterpret_cast<const float4*>(x), n / 8, static_cast<uint4*>(hi16),
        reinterpret_cast<uint2*>(lo8), scale_dev);
  else
    split_e5m2_scalar_kernel<<<grid_for(n), 256, 0, s>>>(x, n, static_cast<__half*>(hi16), lo8,
                                                         scale_dev);
  return cudaGetLastError();
}

cudaError_t launch_hash_fill(float* p, int64_t n, uint32_t seed, float lo, float hi,
                             cudaStream_t s) {
  hash_fill_kernel<<<grid_for(n), 256, 0, s>>>(p, n, seed, lo, hi);
  return cudaGetLastError();
}

namespace {

// One cuBLASLt plan per (handle, shape): descriptors and the heuristic's algorithm (a heuristic
// query costs tens of microseconds of host time; a prefill makes 7 GEMMs a layer). The scale
// pointers are set per call (they differ per weight).
struct Fp8Plan {
  void* handle = nullptr;
  int64_t rows = 0, cols = 0, n_tokens = 0;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  bool ok = false;
};
std::mutex g_plans_mu;
std::deque<Fp8Plan> g_plans;  // stable addresses as plans are added

bool make_plan(Fp8Plan& p, size_t workspace_bytes) {
  auto lt = reinterpret_cast<cublasLtHandle_t>(p.handle);
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  // Fast accumulation (no periodic promotion of the FP8 partial sums): the whole term is ~2^-12
  // of y, so its own rounding does not show.
  const int8_t fast = 1;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  // Column-major view as in matmul.cu: op_T(W^T col-major, cols x rows) * X (cols x T).
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p.la, CUDA_R_8F_E4M3, uint64_t(p.cols), uint64_t(p.rows),
                                    p.cols);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_8F_E5M2, uint64_t(p.cols), uint64_t(p.n_tokens),
                                    p.cols);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_32F, uint64_t(p.rows), uint64_t(p.n_tokens),
                                    p.rows);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt_first_algo(lt, p.op, p.la, p.lb, p.lc, workspace_bytes, &p.algo);
  p.ok = st == CUBLAS_STATUS_SUCCESS;
  return p.ok;
}

}  // namespace

namespace {
Fp8Plan* find_plan(cublasHandle_t blas, int64_t rows, int64_t cols, int64_t n_tokens,
                   size_t workspace_bytes) {
  // A cuBLAS handle wraps a cuBLASLt one and may be used as such (cuBLAS documentation).
  void* handle = blas;
  std::lock_guard<std::mutex> lock(g_plans_mu);
  for (auto& p : g_plans)
    if (p.handle == handle && p.rows == rows && p.cols == cols && p.n_tokens == n_tokens) return &p;
  Fp8Plan p;
  p.handle = handle, p.rows = rows, p.cols = cols, p.n_tokens = n_tokens;
  make_plan(p, workspace_bytes);
  g_plans.push_back(p);
  return &g_plans.back();
}
}  // namespace

bool fp8_gemm_supported(cublasHandle_t blas, int64_t rows, int64_t cols, int64_t n_tokens) {
  if (cols % 16 != 0 || rows % 16 != 0 || n_tokens <= 0) return false;
  return find_plan(blas, rows, cols, n_tokens, kFp8LtWorkspace)->ok;
}

cudaError_t fp8_gemm_accumulate(cublasHandle_t blas, const uint8_t* w8, const float* w_scale,
                                const uint8_t* x8, const float* x_scale, float* y, int64_t rows,
                                int64_t cols, int64_t n_tokens, void* workspace,
                                size_t workspace_bytes, cudaStream_t s) {
  if (cols % 16 != 0 || rows % 16 != 0 || n_tokens <= 0 || workspace_bytes < kFp8LtWorkspace)
    return cudaErrorInvalidValue;
  Fp8Plan* plan = find_plan(blas, rows, cols, n_tokens, kFp8LtWorkspace);
  if (!plan->ok) return cudaErrorNotSupported;
  // The descriptor is shared by callers of this shape: the scale pointers are set and used under
  // the lock (the matmul call only enqueues).
  std::lock_guard<std::mutex> lock(g_plans_mu);
  cublasStatus_t st = cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                     &w_scale, sizeof w_scale);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale,
                                        sizeof x_scale);
  const float alpha = 1.f, beta = 1.f;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmul(reinterpret_cast<cublasLtHandle_t>(plan->handle), plan->op, &alpha, w8,
                        plan->la, x8, plan->lb, &beta, y, plan->lc, y, plan->lc, &plan->algo,
                        workspace, kFp8LtWorkspace, s);
  return st == CUBLAS_STATUS_SUCCESS ? cudaGetLastError() : cudaErrorUnknown;
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
