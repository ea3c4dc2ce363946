// Decode GEMV for the quantized dtypes on integer dot products: x is quantized once per matmul to
// int8 blocks of 32 (plus a residual level), weights stay packed and meet x in dp4a. New dtype:
// one QT<> specialization (unit size, raw load, dot; gemv-int8-dot.cuh) and a case in
// launch_gemv_int8().
#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/gemv-int8-dot.cuh"
#include "kernels/cuda/gemv-store.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/weight-load.cuh"

namespace hearth::cuda {

namespace {

using namespace int8dot;

constexpr int kWarps = 8;  // warps per block
constexpr int kRows = 2;   // rows per warp: each x load feeds kRows rows

// W {d, n} @ x [NT, n] -> y [NT, d]. A warp takes kRows rows; each lane a unit per step, all
// kUnroll*kRows unit loads of a step issued before the first dot (several 16-byte loads in
// flight per lane); each x unit is read once and used for every row of the warp.
// kSplit: warps per row group, each taking every kSplit-th step (gemv_split(); one token).
// kMinBlocks: blocks per SM the register allocation must allow (3: at most 80 registers).
// kStream: weight loads past L1 (weight-load.cuh; launch_plain picks it for Q4_0, where it won).
template <DType T, int NT, int kSplit = 1, int kMinBlocks = 1, bool kStream = false>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    gemv_int8_kernel(GemvBatch batch, QuantizedActs xa) {
  using Q = QT<T>;
  pdl_trigger();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  DeviceWeight w;
  float *y, *add;
  const int64_t row0 = gemv_warp_job<kWarps, kRows, kSplit>(batch, warp, w, y, add);
  const int64_t d = w.rows;
  const int part = warp % kSplit;
  // Split groups stay to the end: store_gemv_rows_split reduces across their warps.
  if (kSplit == 1 && row0 >= d) return;
  int64_t rows[kRows];
  gemv_read_rows(row0, d, rows);
  const int64_t nu = w.cols / Q::kUnit;
  float acc[kRows][NT];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

  using Raw = typename Q::Raw;
  // All kUnroll*kRows unit loads of a step first (several 16-byte loads in flight per lane).
  auto load_step = [&](Raw(&buf)[Q::kUnroll][kRows], int64_t u0) {
#pragma unroll
    for (int k = 0; k < Q::kUnroll; ++k) {
      const int64_t u = u0 + 32 * k < nu ? u0 + 32 * k : nu - 1;
#pragma unroll
      for (int r = 0; r < kRows; ++r) buf[k][r] = Q::template load<kStream>(w, rows[r], u);
    }
  };
  auto dot_step = [&](const Raw(&buf)[Q::kUnroll][kRows], int64_t u0) {
#pragma unroll
    for (int k = 0; k < Q::kUnroll; ++k) {
      const int64_t u = u0 + 32 * k;
      if (u >= nu) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const typename Q::X x = Q::load_x(xa, t, u);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][t] += Q::dot(buf[k][r], x, u);
      }
    }
  };
  // Waiting before the first weight load: measured faster than loading one step of weights
  // ahead of the wait, which pins the x loads behind the weights (sessions 2 and 8: Q4_K
  // tg128 345 against 484 tok/s; again 2026-12-03 on the H200, Q4_K 376 against 505, Q4_0 536
  // against 566). Asking L2 for the block's whole slice before the wait (a bulk prefetch) lost
  // too: Q4_0 tg128 529 against 550.
  pdl_wait();
  for (int64_t u0 = lane + part * 32 * Q::kUnroll; u0 < nu; u0 += kSplit * 32 * Q::kUnroll) {
    Raw raw[Q::kUnroll][kRows];
    load_step(raw, u0);
    dot_step(raw, u0);
  }
  store_gemv_rows_split<kSplit, kWarps, kRows, NT>(acc, warp, lane, row0, d, y, add);
}

// One warp per 32-element block: q1 = round(x / d1), then the residual x - d1*q1 to q2 the
// same way, so d1*q1 + d2*q2 carries ~14 bits of each x.
__global__ void quantize_acts_kernel(const float* __restrict__ x, int8_t* __restrict__ q1,
                                     int8_t* __restrict__ q2, float4* __restrict__ scales,
                                     int64_t n_blocks) {
  pdl_trigger();
  pdl_wait();
  const int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (b >= n_blocks) return;
  quant_block32(x[b * 32 + lane], lane, b, q1, q2, scales);
}

// The one-token kernel, by split.
template <DType T, int kMin, bool kStream>
cudaError_t launch_plain_as(const GemvBatch& b, const QuantizedActs& xa, int split,
                            cudaStream_t s) {
  const dim3 grid(b.block_end[b.n_jobs - 1]), block(kWarps * 32);
  return split == 4 ? launch_pdl(gemv_int8_kernel<T, 1, 4, kMin, kStream>, grid, block, 0, s, b, xa)
         : split == 2
             ? launch_pdl(gemv_int8_kernel<T, 1, 2, kMin, kStream>, grid, block, 0, s, b, xa)
             : launch_pdl(gemv_int8_kernel<T, 1, 1, kMin, kStream>, grid, block, 0, s, b, xa);
}
// Q4_0 streams its weights past L1 (tg128 561 -> 572 tok/s on the H200); Q8_0 lost (441 ->
// 434) and Q4_K did not move (508 -> 507), so they keep the plain loads.
template <DType T, int kMin>
cudaError_t launch_plain(const GemvBatch& b, const QuantizedActs& xa, int split, cudaStream_t s) {
  return launch_plain_as<T, kMin, T == DType::Q4_0>(b, xa, split, s);
}

template <DType T>
cudaError_t gemv_typed(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa, cudaStream_t s) {
  const int64_t nu = xa.cols / QT<T>::kUnit,
                steps = (nu + 32 * QT<T>::kUnroll - 1) / (32 * QT<T>::kUnroll);
  const int split = xa.n_tokens == 1 ? gemv_split(jobs, n_jobs, steps, true) : 1;
  const GemvBatch b = make_gemv_batch(jobs, n_jobs, split);
  const unsigned grid = b.block_end[b.n_jobs - 1];
  switch (xa.n_tokens) {
    case 1:
      if constexpr (T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K) {
        if (gemv_min_blocks(T, grid) == 3) return launch_plain<T, 3>(b, xa, split, s);
      }
      if constexpr (T == DType::Q8_0) {
        if (gemv_min_blocks(T, grid) == 4) return launch_plain<T, 4>(b, xa, split, s);
      }
      return launch_plain<T, 1>(b, xa, split, s);
    case 2:
      return launch_pdl(gemv_int8_kernel<T, 2>, dim3(grid), dim3(kWarps * 32), 0, s, b, xa);
    case 3:
      return launch_pdl(gemv_int8_kernel<T, 3>, dim3(grid), dim3(kWarps * 32), 0, s, b, xa);
    case 4:
      return launch_pdl(gemv_int8_kernel<T, 4>, dim3(grid), dim3(kWarps * 32), 0, s, b, xa);
    default:
      return cudaErrorInvalidValue;
  }
}

size_t align256(size_t v) {
  return (v + 255) / 256 * 256;
}

}  // namespace

bool uses_int8_gemv(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

size_t quantized_acts_bytes(int64_t n_tokens, int64_t cols) {
  const size_t q = align256(size_t(n_tokens) * size_t(cols));
  return 2 * q + align256(size_t(n_tokens) * size_t(cols / 32) * 16);
}

cudaError_t launch_quantize_acts(const float* x, int64_t n_tokens, int64_t cols, void* buf,
                                 QuantizedActs* out, cudaStream_t s) {
  if (cols % 32 != 0 || n_tokens <= 0 || !buf) return cudaErrorInvalidValue;
  const QuantizedActs v = quantized_acts_view(buf, n_tokens, cols);
  const int64_t nb = n_tokens * cols / 32;
  const unsigned grid = unsigned((nb + kWarps - 1) / kWarps);
  *out = v;
  return launch_pdl(quantize_acts_kernel, dim3(grid), dim3(kWarps * 32), 0, s, x,
                    const_cast<int8_t*>(v.q1), const_cast<int8_t*>(v.q2),
                    reinterpret_cast<float4*>(const_cast<float*>(v.scales)), nb);
}

QuantizedActs quantized_acts_view(void* buf, int64_t n_tokens, int64_t cols) {
  auto* base = static_cast<uint8_t*>(buf);
  const size_t q = align256(size_t(n_tokens) * size_t(cols));
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const int8_t*>(base + q),
          reinterpret_cast<const float*>(base + 2 * q), n_tokens, cols};
}

GemvBatch make_gemv_batch(const GemvJob* jobs, int n_jobs, int split) {
  GemvBatch b;
  b.n_jobs = n_jobs;
  const int64_t rows_per_block = kGemvRowsPerBlock / split;
  unsigned end = 0;
  for (int i = 0; i < 3; ++i) {
    if (i < n_jobs) {
      b.jobs[i] = jobs[i];
      end += unsigned((jobs[i].w.rows + rows_per_block - 1) / rows_per_block);
    }
    b.block_end[i] = end;
  }
  return b;
}

int gemv_min_blocks(DType t, int64_t grid_blocks) {
  // Q4_K at 80 registers instead of 94 (no spills) fits 3 blocks per SM instead of 2: faster
  // for grids of several waves (11008x4096: 1.85 -> 2.06 TB/s on the H200), slower for one
  // wave (4096x4096: 1.51 -> 1.42). Q5_K (116 bytes of spills) and Q6_K (16-24) stay.
  // Q8_0 at 64 registers instead of 94 (no spills) fits 4 blocks per SM instead of 2: ncu showed
  // its warps stalled on memory at 25% occupancy; with the split below, tg128 392 -> 438 tok/s
  // (session 9). Q4_0 at 64 spills, and at 80 (3 blocks) it lost (557 -> 554).
  if (t == DType::Q8_0) return 4;
  return t == DType::Q4_K && grid_blocks > 512 ? 3 : 1;
}

int gemv_split(const GemvJob* jobs, int n_jobs, int64_t steps, bool int8) {
  // Measured on the H200 (docs/performance-cuda.md, session 8): the float GEMV gains from
  // splitting (F16 4096x11008 2.5 -> 3.4 TB/s; F16 tg128 225 -> 246 with grids up to 4096
  // blocks, so gate/up splits too).
  constexpr int kMaxFloat = 4;
  constexpr int64_t kMaxBlocks = 4096;
  // The int8 kernels split only where 4 blocks fit per SM (Q8_0 at 64 registers, above): split
  // 2 took Q8_0 4096x4096 from 2.49 to 2.74 TB/s; at 2 blocks per SM a split only lengthens the
  // grid (Q4_0 4096x11008 2.36 -> 2.02).
  const int int8_cap = jobs[0].w.dtype == DType::Q8_0 ? 2 : 1;
  const int cap = int8 ? int8_cap : kMaxFloat;
  int64_t blocks = 0;
  for (int i = 0; i < n_jobs; ++i)
    blocks += (jobs[i].w.rows + kGemvRowsPerBlock - 1) / kGemvRowsPerBlock;
  int split = 1;
  while (split < 8 && 2 * split <= cap && 2 * split <= steps && blocks * split < kMaxBlocks)
    split *= 2;
  return split;
}

cudaError_t launch_gemv_int8(const DeviceWeight& w, const QuantizedActs& xa, float* y,
                             cudaStream_t s) {
  const GemvJob job{w, y, nullptr};
  return launch_gemv_int8_multi(&job, 1, xa, s);
}

cudaError_t launch_gemv_int8_multi(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa,
                                   cudaStream_t s) {
  if (n_jobs < 1 || n_jobs > 3 || xa.n_tokens < 1 || xa.n_tokens > kGemvMaxTokens)
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.cols != xa.cols || jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.rows <= 0)
      return cudaErrorInvalidValue;
  static_assert(kWarps * kRows == kGemvRowsPerBlock, "block ranges assume this many rows");
  switch (jobs[0].w.dtype) {
    case DType::Q4_0:
      return gemv_typed<DType::Q4_0>(jobs, n_jobs, xa, s);
    case DType::Q4_1:
      return gemv_typed<DType::Q4_1>(jobs, n_jobs, xa, s);
    case DType::Q5_0:
      return gemv_typed<DType::Q5_0>(jobs, n_jobs, xa, s);
    case DType::Q5_1:
      return gemv_typed<DType::Q5_1>(jobs, n_jobs, xa, s);
    case DType::Q8_0:
      return gemv_typed<DType::Q8_0>(jobs, n_jobs, xa, s);
    case DType::Q4_K:
      return gemv_typed<DType::Q4_K>(jobs, n_jobs, xa, s);
    case DType::Q5_K:
      return gemv_typed<DType::Q5_K>(jobs, n_jobs, xa, s);
    case DType::Q6_K:
      return gemv_typed<DType::Q6_K>(jobs, n_jobs, xa, s);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
