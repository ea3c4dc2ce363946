// Decode GEMV for the quantized dtypes on integer dot products: x is quantized once per matmul to
// int8 blocks of 32 (plus a residual level), weights stay packed and meet x in dp4a. New dtype:
// one QT<> specialization (unit size, raw load, dot; gemv-int8-dot.cuh) and a case in
// launch_gemv_int8().
#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/bulk-copy.cuh"
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
      for (int r = 0; r < kRows; ++r)
        buf[k][r] = Q::template load < kStream ? WeightRead::kStreamed
                                               : WeightRead::kCached > (w, rows[r], u);
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

// The one-token kernel with the block's rows copied into shared memory ahead of the PDL wait:
// thread 0 asks the copy engine for each array's rows of the block (bulk-copy.cuh), so they land
// while the kernels before are still running; after the wait only x comes from L2. (Loads issued
// ahead of the wait into registers, or asked of L2, lost: the comment in gemv_int8_kernel.) Run
// where kAheadWins says.
// Shared memory: kGemvRowsPerBlock rows of every array (row_bytes() % 16 == 0, checked by
// ahead_bytes()).
template <DType T>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_int8_ahead_kernel(GemvBatch batch, QuantizedActs xa) {
  using Q = QT<T>;
  extern __shared__ __align__(16) uint8_t slice[];
  __shared__ uint64_t landed;
  pdl_trigger();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  DeviceWeight w;
  float *y, *add;
  const int64_t row0 = gemv_warp_job<kWarps, kRows, 1>(batch, warp, w, y, add);
  const int64_t d = w.rows, block_row0 = row0 - warp * kRows;
  const int64_t block_rows = min(kGemvRowsPerBlock, d - block_row0);
  const WeightRowBytes rb = Q::row_bytes(w.blocks_per_row);
  const int64_t bytes[5] = {rb.body, rb.aux0, rb.aux1, rb.aux16, rb.head};
  const uint8_t* from[5] = {
      w.body, reinterpret_cast<const uint8_t*>(w.aux0), reinterpret_cast<const uint8_t*>(w.aux1),
      reinterpret_cast<const uint8_t*>(w.aux16), reinterpret_cast<const uint8_t*>(w.aux_head)};
  uint8_t* at[5];
  int64_t off = 0;
#pragma unroll
  for (int f = 0; f < 5; ++f) {
    at[f] = slice + off;
    off += kGemvRowsPerBlock * bytes[f];
  }
  if (threadIdx.x == 0) {
    bulk_barrier_init(&landed);
    int64_t total = 0;
#pragma unroll
    for (int f = 0; f < 5; ++f) total += block_rows * bytes[f];
    bulk_expect_bytes(&landed, uint32_t(total));
#pragma unroll
    for (int f = 0; f < 5; ++f)
      if (bytes[f])
        bulk_copy_to_shared(at[f], from[f] + block_row0 * bytes[f], uint32_t(block_rows * bytes[f]),
                            &landed);
  }
  // The block's copy as a weight of its own rows (row r of the block is row block_row0 + r).
  DeviceWeight view = w;
  view.body = at[0];
  view.aux0 = reinterpret_cast<const uint32_t*>(at[1]);
  view.aux1 = reinterpret_cast<const uint32_t*>(at[2]);
  view.aux16 = reinterpret_cast<const uint16_t*>(at[3]);
  view.aux_head = reinterpret_cast<const uint4*>(at[4]);
  __syncthreads();  // the barrier is initialised before anyone waits on it
  pdl_wait();
  if (row0 >= d) return;  // (warp 0, whose thread 0 issued the copies, always has rows)
  int64_t rows[kRows];
  gemv_read_rows(row0, d, rows);
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] -= block_row0;
  const int64_t nu = w.cols / Q::kUnit;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  bulk_wait(&landed, 0);
  for (int64_t u0 = lane; u0 < nu; u0 += 32 * Q::kUnroll) {
    typename Q::Raw raw[Q::kUnroll][kRows];
#pragma unroll
    for (int k = 0; k < Q::kUnroll; ++k) {
      const int64_t u = u0 + 32 * k < nu ? u0 + 32 * k : nu - 1;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        raw[k][r] = Q::template load<WeightRead::kShared>(view, rows[r], u);
    }
#pragma unroll
    for (int k = 0; k < Q::kUnroll; ++k) {
      const int64_t u = u0 + 32 * k;
      if (u >= nu) break;
      const typename Q::X x = Q::load_x(xa, 0, u);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] += Q::dot(raw[k][r], x, u);
    }
  }
  float out[kRows][1];
#pragma unroll
  for (int r = 0; r < kRows; ++r) out[r][0] = acc[r];
  store_gemv_rows<kRows, 1>(out, lane, row0, d, y, add);
}

// Shared memory the ahead kernel needs for rows of `cols`, or 0 where it cannot take them: an
// array's row that is not a whole number of 16-byte pieces (bulk copies move those), or a copy
// over kAheadMaxBytes (a block that holds more keeps the next kernels' blocks off the SM).
constexpr int64_t kAheadMaxBytes = 72 * 1024;
template <DType T>
int64_t ahead_bytes(int64_t cols) {
  if (cols % QT<T>::kUnit != 0 || cols <= 0) return 0;
  const int64_t per_block = T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K ? 256 : 32;
  const WeightRowBytes rb = QT<T>::row_bytes(cols / per_block);
  const int64_t bytes[5] = {rb.body, rb.aux0, rb.aux1, rb.aux16, rb.head};
  int64_t total = 0;
  for (int f = 0; f < 5; ++f) {
    if (bytes[f] % 16 != 0) return 0;
    total += kGemvRowsPerBlock * bytes[f];
  }
  return total <= kAheadMaxBytes ? total : 0;
}
// ... and for these jobs: every array they read 16-byte aligned as well.
template <DType T>
int64_t ahead_bytes(const GemvJob* jobs, int n_jobs) {
  const WeightRowBytes rb = QT<T>::row_bytes(jobs[0].w.blocks_per_row);
  const int64_t bytes[5] = {rb.body, rb.aux0, rb.aux1, rb.aux16, rb.head};
  for (int i = 0; i < n_jobs; ++i) {
    const DeviceWeight& w = jobs[i].w;
    const void* arrays[5] = {w.body, w.aux0, w.aux1, w.aux16, w.aux_head};
    for (int f = 0; f < 5; ++f)
      if (bytes[f] && (!arrays[f] || reinterpret_cast<uintptr_t>(arrays[f]) % 16 != 0)) return 0;
  }
  return ahead_bytes<T>(jobs[0].w.cols);
}

// Where the ahead kernel runs: Q6_K only. H200, llama2-7b shapes, the same binary with and without
// (session 39, docs/performance-cuda.md): Q6_K 4096x4096 10.6 -> 8.1 us, 11008x4096 24.6 ->
// 19.2, tg128 of a Q6_K file 282 -> 323 tok/s (its plain loads gather 16-byte pieces of 208-byte
// blocks; the copy reads the rows whole). Every other dtype lost, in the GEMV alone (Q4_0
// 4096x4096 5.4 -> 5.9 us) and end to end (Q4_0 564 -> 549 tok/s, Q4_K 505 -> 439, Q8_0 380 ->
// 359): their loads already stream, and the copy adds a pass through shared memory.
template <DType T>
constexpr bool kAheadWins = T == DType::Q6_K;

template <DType T>
cudaError_t launch_ahead(const GemvBatch& b, const QuantizedActs& xa, int64_t smem,
                         cudaStream_t s) {
  static const cudaError_t allowed = cudaFuncSetAttribute(
      gemv_int8_ahead_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kAheadMaxBytes));
  if (allowed != cudaSuccess) return allowed;
  return launch_pdl(gemv_int8_ahead_kernel<T>, dim3(b.block_end[b.n_jobs - 1]), dim3(kWarps * 32),
                    size_t(smem), s, b, xa);
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
cudaError_t gemv_typed(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa,
                       GemvWeights weights, cudaStream_t s) {
  if constexpr (kAheadWins<T>) {
    if (xa.n_tokens == 1 && weights == GemvWeights::kCopiedAhead) {
      if (const int64_t smem = ahead_bytes<T>(jobs, n_jobs))
        return launch_ahead<T>(make_gemv_batch(jobs, n_jobs), xa, smem, s);
    }
  }
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

int64_t gemv_ahead_smem_bytes(DType t, int64_t cols) {
  return t == DType::Q6_K ? ahead_bytes<DType::Q6_K>(cols) : 0;  // (kAheadWins)
}

cudaError_t launch_gemv_int8(const DeviceWeight& w, const QuantizedActs& xa, float* y,
                             cudaStream_t s) {
  const GemvJob job{w, y, nullptr};
  return launch_gemv_int8_multi(&job, 1, xa, s);
}

cudaError_t launch_gemv_int8_multi(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa,
                                   cudaStream_t s, GemvWeights weights) {
  if (n_jobs < 1 || n_jobs > 3 || xa.n_tokens < 1 || xa.n_tokens > kGemvMaxTokens)
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.cols != xa.cols || jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.rows <= 0)
      return cudaErrorInvalidValue;
  static_assert(kWarps * kRows == kGemvRowsPerBlock, "block ranges assume this many rows");
  switch (jobs[0].w.dtype) {
    case DType::Q4_0:
      return gemv_typed<DType::Q4_0>(jobs, n_jobs, xa, weights, s);
    case DType::Q4_1:
      return gemv_typed<DType::Q4_1>(jobs, n_jobs, xa, weights, s);
    case DType::Q5_0:
      return gemv_typed<DType::Q5_0>(jobs, n_jobs, xa, weights, s);
    case DType::Q5_1:
      return gemv_typed<DType::Q5_1>(jobs, n_jobs, xa, weights, s);
    case DType::Q8_0:
      return gemv_typed<DType::Q8_0>(jobs, n_jobs, xa, weights, s);
    case DType::Q4_K:
      return gemv_typed<DType::Q4_K>(jobs, n_jobs, xa, weights, s);
    case DType::Q5_K:
      return gemv_typed<DType::Q5_K>(jobs, n_jobs, xa, weights, s);
    case DType::Q6_K:
      return gemv_typed<DType::Q6_K>(jobs, n_jobs, xa, weights, s);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
