// Matmul on CUDA. Decode (T <= kGemvMaxTokens): plain dtypes stream through a float GEMV here,
// one warp per kRows rows, 16-byte loads unrolled so several are in flight; quantized dtypes go
// to gemv-int8.cu. Prefill: W dequantized to fp16 once per call, then a cuBLASLt tensor-core GEMM
// with an algorithm per token bucket (gemm-half-lt.h; F16/BF16: x = hi + lo, the lo pass in FP8
// when W has an e4m3 copy, gemm-fp8.h).
#include <cublas_v2.h>

#include <algorithm>

#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/gemm-fp8.h"
#include "kernels/cuda/gemm-half-lt.h"
#include "kernels/cuda/gemv-store.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe-ops.h"
#include "kernels/cuda/weight-load.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 8;  // warps per block
constexpr int kRows = 2;   // rows per warp: each x load feeds kRows rows
// 16-byte groups per lane per row in flight. 4 for every row length: with the steps split over
// warps (gemv_split) 8 lost to 4 on the H200 (F16 4096x4096 2.74 vs 3.07 TB/s, tg128 246 vs
// 254 tok/s), since 8 needs 110 registers (2 blocks per SM) against 62 (4 blocks).
constexpr int kFloatUnroll = 4;

// Raw 8-element groups of a plain dtype, held packed in registers until used (F16/BF16 take 4
// registers a group instead of 8, so twice as many loads fit in flight).
// kStream: the 16-byte words past L1 (weight-load.cuh); F32 rows keep __ldg.
template <DType T, bool kStream = false>
struct PlainGroup {
  uint4 v;
  static __device__ __forceinline__ PlainGroup load(const DeviceWeight& w, int64_t row, int64_t g) {
    return {load_weight16<kStream>(reinterpret_cast<const uint4*>(w.body) +
                                   (row * w.cols + g * 8) / 8)};
  }
  __device__ __forceinline__ void unpack(float (&o)[8]) const {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (T == DType::F16) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
        o[2 * i] = f.x;
        o[2 * i + 1] = f.y;
      } else {
        o[2 * i] = __uint_as_float(u[i] << 16);
        o[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
      }
    }
  }
};
template <bool kStream>
struct PlainGroup<DType::F32, kStream> {
  float4 a, b;
  static __device__ __forceinline__ PlainGroup load(const DeviceWeight& w, int64_t row, int64_t g) {
    const float4* p = reinterpret_cast<const float4*>(w.body) + (row * w.cols + g * 8) / 4;
    return {__ldg(p), __ldg(p + 1)};
  }
  __device__ __forceinline__ void unpack(float (&o)[8]) const {
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
  }
};

// W {d, n} @ X [NT, n] -> Y [NT, d]; n % 8 == 0 (every quant block size is; plain types with
// other n take gemv_scalar_kernel).
// kSplit: warps per row group, each taking every kSplit-th step (gemv_split(); one token).
// kStream: weight loads past L1 (weight-load.cuh; the split-2 and split-4 kernels).
template <DType T, int NT, int kUnroll, int kSplit = 1, bool kStream = false>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(GemvBatch batch, const float* __restrict__ x) {
  using Group = PlainGroup<T, kStream>;
  pdl_trigger();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  DeviceWeight w;
  float *y, *add;
  const int64_t row0 = gemv_warp_job<kWarps, kRows, kSplit>(batch, warp, w, y, add);
  const int64_t d = w.rows, n = w.cols;
  const int part = warp % kSplit;
  // Split groups stay to the end: store_gemv_rows_split reduces across their warps.
  if (kSplit == 1 && row0 >= d) return;
  int64_t rows[kRows];
  gemv_read_rows(row0, d, rows);
  const int64_t ng = n >> 3;
  float acc[kRows][NT];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

  // All weight loads of a step first, so kUnroll*kRows loads are in flight per lane.
  auto load_step = [&](Group(&buf)[kUnroll][kRows], int64_t g0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t g = g0 + 32 * u < ng ? g0 + 32 * u : ng - 1;
#pragma unroll
      for (int r = 0; r < kRows; ++r) buf[u][r] = Group::load(w, rows[r], g);
    }
  };
  auto dot_step = [&](const Group(&buf)[kUnroll][kRows], int64_t g0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t g = g0 + 32 * u;
      if (g >= ng) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float4* xp = reinterpret_cast<const float4*>(x + t * n + g * 8);
        const float4 a = __ldg(xp), b = __ldg(xp + 1);
        const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float wv[8];
          buf[u][r].unpack(wv);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[r][t] = fmaf(wv[i], xv[i], acc[r][t]);
        }
      }
    }
  };
  Group raw[kUnroll][kRows];
  // The first step's weights stream in before waiting for the kernel that wrote x (PDL).
  const int64_t first = lane + part * 32 * kUnroll;
  load_step(raw, first);
  pdl_wait();
  for (int64_t g0 = first; g0 < ng; g0 += kSplit * 32 * kUnroll) {
    if (g0 != first) load_step(raw, g0);
    dot_step(raw, g0);
  }
  store_gemv_rows_split<kSplit, kWarps, kRows, NT>(acc, warp, lane, row0, d, y, add);
}

// Plain dtypes with n % 8 != 0: one warp per row, one element per lane step.
__global__ void gemv_scalar_kernel(DeviceWeight w, const float* __restrict__ x,
                                   float* __restrict__ y, int64_t n_tokens) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= w.rows) return;
  for (int64_t t = 0; t < n_tokens; ++t) {
    float acc = 0.f;
    for (int64_t i = lane; i < w.cols; i += 32)
      acc = fmaf(plain_at(w, row * w.cols + i), x[t * w.cols + i], acc);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[t * w.rows + row] = acc;
  }
}

template <DType T, int U>
cudaError_t gemv_launch(const GemvJob* jobs, int n_jobs, const float* x, int64_t nt,
                        cudaStream_t s) {
  const int64_t ng = jobs[0].w.cols / 8, steps = (ng + 32 * U - 1) / (32 * U);
  const int split = nt == 1 ? gemv_split(jobs, n_jobs, steps, false) : 1;
  const GemvBatch w = make_gemv_batch(jobs, n_jobs, split);
  const unsigned grid = w.block_end[w.n_jobs - 1];
  switch (nt) {
    case 1:
      // Split kernels stream their weights past L1 (weight-load.cuh). gemv_split caps the
      // float split at 4.
      if (split == 4)
        return launch_pdl(gemv_kernel<T, 1, U, 4, true>, dim3(grid), dim3(kWarps * 32), 0, s, w, x);
      if (split == 2)
        return launch_pdl(gemv_kernel<T, 1, U, 2, true>, dim3(grid), dim3(kWarps * 32), 0, s, w, x);
      return launch_pdl(gemv_kernel<T, 1, U>, dim3(grid), dim3(kWarps * 32), 0, s, w, x);
    case 2:
      return launch_pdl(gemv_kernel<T, 2, U>, dim3(grid), dim3(kWarps * 32), 0, s, w, x);
    case 3:
      return launch_pdl(gemv_kernel<T, 3, U>, dim3(grid), dim3(kWarps * 32), 0, s, w, x);
    default:
      return launch_pdl(gemv_kernel<T, 4, U>, dim3(grid), dim3(kWarps * 32), 0, s, w, x);
  }
}

template <DType T>
cudaError_t gemv_typed(const GemvJob* jobs, int n_jobs, const float* x, int64_t nt,
                       cudaStream_t s) {
  return gemv_launch<T, kFloatUnroll>(jobs, n_jobs, x, nt, s);
}

size_t align256(size_t v) {
  return (v + 255) / 256 * 256;
}

// x = hi + lo in fp16 pairs: a full-precision (F16/BF16) weight's GEMM runs twice, on hi then
// lo, so x keeps ~22 bits instead of fp16's 11 (one pass errs ~1.4e-3 on the bf16 goldens,
// over the issue's 1e-3 bound).
__global__ void f32_to_f16_split_kernel(const float* x, __half* hi, __half* lo, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const __half h = __float2half_rn(x[i]);
    hi[i] = h;
    lo[i] = __float2half_rn(x[i] - __half2float(h));
  }
}

// Full-precision weights take x as hi + lo (one fp16 pass is ~1.4e-3 off on the bf16 goldens).
bool split_x(DType t) {
  return t == DType::F16 || t == DType::BF16;
}

// The FP8 correction applies: a split-x dtype with an e4m3 copy (the backend makes one only when
// its options ask for the FP8 pass), not refused by the device.
bool fp8_able(const DeviceWeight& w) {
  return split_x(w.dtype) && w.w8 && w.w8_scale;
}
bool use_fp8(const DeviceWeight& w) {
  return fp8_able(w) && gemm_fp8_working();
}

// The prefill workspace: x's converted forms first, at offsets that depend on x's size and
// the dtype's kind only (so a cached conversion serves the next weight reading the same x),
// then W in fp16 (non-F16 dtypes) and cuBLASLt's workspace.
//   x16 [nx] fp16 | x16_lo [nx] fp16 (split-x dtypes) | lo8 [nx] fp8, scale (FP8-able)
//   | w16 [rows * cols] fp16 | lt workspace (FP8-able)
struct PrefillWorkspace {
  __half *x16 = nullptr, *x16_lo = nullptr;  // x's forms
  uint8_t* lo8 = nullptr;
  float* xscale = nullptr;
  __half* w16 = nullptr;  // W's
  void* lt_ws = nullptr;
  size_t bytes = 0;
};
struct Carver {
  uint8_t* at;
  size_t off = 0;
  uint8_t* take(size_t n) {
    uint8_t* ptr = at ? at + off : nullptr;
    off += align256(n);
    return ptr;
  }
};
// x's forms: the front of the workspace, the same for every weight of a kind (split, fp8).
void carve_x(PrefillWorkspace& p, Carver& c, size_t nx, bool split, bool fp8) {
  p.x16 = reinterpret_cast<__half*>(c.take(nx * 2));
  if (split) p.x16_lo = reinterpret_cast<__half*>(c.take(nx * 2));
  if (fp8) {
    p.lo8 = c.take(nx);
    p.xscale = reinterpret_cast<float*>(c.take(256));
  }
}
PrefillWorkspace carve(const DeviceWeight& w, int64_t n_tokens, void* base) {
  PrefillWorkspace p;
  Carver c{static_cast<uint8_t*>(base)};
  carve_x(p, c, size_t(n_tokens) * size_t(w.cols), split_x(w.dtype), fp8_able(w));
  // (no room for W's fp16 form when it is resident: DeviceWeight::w16)
  if (w.dtype != DType::F16 && !w.w16)
    p.w16 = reinterpret_cast<__half*>(c.take(size_t(w.rows) * w.cols * 2));
  // (cuBLASLt's: the FP8 pass and the fp16 GEMMs' algorithms, gemm-half-lt.h)
  static_assert(kFp8LtWorkspace >= kGemmHalfLtWorkspace, "one workspace serves both");
  p.lt_ws = c.take(kFp8LtWorkspace);
  p.bytes = c.off;
  return p;
}

}  // namespace

cudaError_t launch_gemv_float_multi(const GemvJob* jobs, int n_jobs, const float* x,
                                    int64_t n_tokens, cudaStream_t s) {
  if (n_jobs < 1 || n_jobs > 3 || n_tokens < 1 || n_tokens > kGemvMaxTokens)
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.cols != jobs[0].w.cols || jobs[i].w.cols % 8 != 0 ||
        jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.rows <= 0)
      return cudaErrorInvalidValue;
  static_assert(kWarps * kRows == kGemvRowsPerBlock, "block ranges assume this many rows");
  switch (jobs[0].w.dtype) {
    case DType::F32:
      return gemv_typed<DType::F32>(jobs, n_jobs, x, n_tokens, s);
    case DType::F16:
      return gemv_typed<DType::F16>(jobs, n_jobs, x, n_tokens, s);
    case DType::BF16:
      return gemv_typed<DType::BF16>(jobs, n_jobs, x, n_tokens, s);
    default:
      return cudaErrorInvalidValue;
  }
}

bool prefill_x_producible() {
  return gemm_fp8_working();
}

XSplitOut prefill_x_slots(int64_t n, void* workspace) {
  PrefillWorkspace p;
  Carver c{static_cast<uint8_t*>(workspace)};
  carve_x(p, c, size_t(n), true, true);
  return {p.x16, p.lo8, p.xscale, c.off};
}

size_t matmul_workspace_bytes(const DeviceWeight& w, int64_t n_tokens) {
  if (n_tokens <= kGemvMaxTokens)
    return uses_int8_gemv(w.dtype) ? quantized_acts_bytes(n_tokens, w.cols) : 0;
  if (w.dtype == DType::F32) return 0;
  return carve(w, n_tokens, nullptr).bytes;
}

cudaError_t launch_matmul(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y,
                          void* workspace, size_t workspace_bytes, cublasHandle_t blas,
                          cudaStream_t s, PrefillX* xcache, bool accumulate) {
  if (n_tokens <= 0 || w.rows <= 0) return cudaSuccess;
  if (n_tokens <= kGemvMaxTokens) {
    if (accumulate) return cudaErrorInvalidValue;  // the GEMV adds through GemvJob::add_to
    if (w.cols % 8 != 0) {
      const unsigned grid = unsigned((w.rows + kWarps - 1) / kWarps);
      gemv_scalar_kernel<<<grid, kWarps * 32, 0, s>>>(w, x, y, n_tokens);
      return cudaGetLastError();
    }
    if (uses_int8_gemv(w.dtype)) {
      if (workspace_bytes < quantized_acts_bytes(n_tokens, w.cols)) return cudaErrorInvalidValue;
      QuantizedActs xa;
      if (cudaError_t e = launch_quantize_acts(x, n_tokens, w.cols, workspace, &xa, s);
          e != cudaSuccess)
        return e;
      return launch_gemv_int8(w, xa, y, s);
    }
    const bool plain = w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16;
    if (!plain) return launch_gemv_dq8(w, x, n_tokens, y, s);  // no int8 kernel: MXFP4
    const GemvJob job{w, y, nullptr};
    return launch_gemv_float_multi(&job, 1, x, n_tokens, s);
  }
  // Column-major view: W row-major {d, n} is W^T col-major (n x d, ld n); X [T, n] is n x T;
  // Y [T, d] is d x T. So Y = op_T(W) * X.
  const int m = int(w.rows), nn = int(n_tokens), k = int(w.cols);
  const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
  if (cublasSetStream(blas, s) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
  if (w.dtype == DType::F32) {
    const cublasStatus_t st =
        cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, k, &alpha,
                    reinterpret_cast<const float*>(w.body), k, x, k, &beta, y, m);
    return st == CUBLAS_STATUS_SUCCESS ? cudaGetLastError() : cudaErrorUnknown;
  }
  const PrefillWorkspace ws = carve(w, n_tokens, workspace);
  if (workspace_bytes < ws.bytes) return cudaErrorInvalidValue;
  const __half* w16 = reinterpret_cast<const __half*>(w.body);
  // y (+)= W16 . x16 through a cuBLASLt algorithm per token bucket, or cublasGemmEx where
  // cuBLASLt has none for the shape.
  auto gemm16 = [&](const __half* x16, float b) -> cudaError_t {
    const cudaError_t e =
        gemm_half_lt(blas, w16, x16, y, m, k, nn, b, ws.lt_ws, kFp8LtWorkspace, s);
    if (e != cudaErrorNotSupported) return e;
    const cublasStatus_t st =
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, k, &alpha, w16, CUDA_R_16F, k, x16,
                     CUDA_R_16F, k, &b, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? cudaGetLastError() : cudaErrorUnknown;
  };
  if (w.w16) {
    w16 = reinterpret_cast<const __half*>(w.w16);
  } else if (w.dtype != DType::F16) {
    if (cudaError_t e = launch_weight_to_f16(w, ws.w16, s); e != cudaSuccess) return e;
    w16 = ws.w16;
  }
  const int64_t nx = n_tokens * w.cols;
  // What x becomes in the workspace; a cache naming the same x, size and kind skips it (Q, K and
  // V, or gate and up, read one x).
  const bool fp8 = use_fp8(w) && fp8_gemm_supported(blas, m, k, nn);
  PrefillX want{x, nx,
                fp8                ? PrefillX::kHiLo8
                : split_x(w.dtype) ? PrefillX::kHiLo16
                                   : PrefillX::kHalf};
  bool ready = xcache && *xcache == want;
  if (xcache) *xcache = {};  // until the conversion below is queued
  if (fp8) {
    // y = W.hi (fp16) + W8.lo8 (FP8): the correction at FP8 rate. Shapes cuBLASLt has no FP8
    // algorithm for, and any failure (then for good), take the two fp16 passes, which rewrite y
    // (accumulating: add to it, once, since the failed correction added nothing).
    if (!ready) {
      if (cudaError_t e = launch_split_x_fp8(x, nx, ws.x16, ws.lo8, ws.xscale, s); e != cudaSuccess)
        return e;
    }
    if (xcache) *xcache = want;
    auto correction = [&] {
      return fp8_gemm_accumulate(blas, w.w8, w.w8_scale, ws.lo8, ws.xscale, y, m, k, nn, ws.lt_ws,
                                 kFp8LtWorkspace, s);
    };
    // Accumulating, the correction goes first: should it fail, nothing was added yet and the
    // fp16 passes below start over. Otherwise the hi pass writes y and the correction adds.
    cudaError_t e = accumulate ? correction() : cudaSuccess;
    if (e == cudaSuccess) {
      if (const cudaError_t hi = gemm16(ws.x16, beta); hi != cudaSuccess) return hi;
      if (accumulate) return cudaSuccess;
      e = correction();
      if (e == cudaSuccess) return e;
    }
    gemm_fp8_mark_failed();
    if (xcache) *xcache = {};
    want.kind = PrefillX::kHiLo16;  // the fp16 passes below convert x again, lo included
    ready = false;
  }
  if (!ready) {
    if (split_x(w.dtype)) {
      const int64_t blocks = std::min<int64_t>((nx + 255) / 256, 65535 * 4);
      f32_to_f16_split_kernel<<<unsigned(blocks), 256, 0, s>>>(x, ws.x16, ws.x16_lo, nx);
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    } else if (cudaError_t e = launch_f32_to_f16(x, ws.x16, nx, s); e != cudaSuccess) {
      return e;
    }
  }
  if (xcache) *xcache = want;
  const __half* x16 = ws.x16;
  const __half* x16_lo = ws.x16_lo;
  cudaError_t e = gemm16(x16, beta);
  if (e == cudaSuccess && split_x(w.dtype)) e = gemm16(x16_lo, 1.f);
  return e;
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
