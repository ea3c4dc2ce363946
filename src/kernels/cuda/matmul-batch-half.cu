// The fp16 form of the batched decode matmul (from kMatmulBatchHalfMinTokens tokens): Y [T, d] =
// X [T, n] @ W^T on m16n8k16 fp16 MMAs with f32 accumulators, each weight byte read once per
// group of up to 64 tokens.
// Where the int8 form (matmul-batch.cu) stages W through shared memory, here each lane loads
// its own weight blocks straight into registers, P steps ahead of their use: a lane's 16 bytes
// of a Q4_0 block are its whole A-fragment share for eight MMAs once the block's k order is
// permuted (a dot product does not care which k slot an element takes, as long as x's element
// takes the same one). Only x, shared by the block's warps, goes through shared memory. A
// profile of the staged form at 32 tokens (H200, ncu) had 2.7 weight bytes a warp instruction,
// 12 of 64 warps an SM resident (shared memory bound) and the split-K partial sums written to
// and read back from L2 by a second kernel; here K splits are the blocks of one cluster and
// their partial sums are added through distributed shared memory.
// New dtype: one HalfRows<> specialization (what a lane loads per row and step, and how one
// MMA's A halves come out of it).
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cp-async.cuh"
#include "kernels/cuda/decode-batch.h"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul-half-rows.cuh"
#include "kernels/cuda/quant-device.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// Three blocks an SM (12 warps): at most 168 registers a thread. More registers (fewer blocks)
// and fewer (spilling, or fewer weight steps in flight) were both slower on the H200.
constexpr int kMinBlocksPerSm = 3;
constexpr int kStages = 3;  // x stages in flight

// Up to three matrices of one x (Q/K/V, gate/up) in one launch: row tiles of kRows.
struct HalfPlan {
  GemvJob jobs[3];
  unsigned tile_end[3] = {0, 0, 0};
  int n_jobs = 0;
  int splits = 1;       // gridDim.z: K ranges, the blocks of one cluster
  int split_steps = 0;  // steps of K per split
};

// A block: kWarps warps of MT 16-row MMA tiles each, NT 8-token tiles, weights P steps ahead.
template <DType T, int NT, int MT, int P>
struct HalfShape {
  static constexpr int kRows = kWarps * MT * 16;
  static constexpr int kTokens = NT * 8;
  static constexpr int kBlocks = 4 * HalfRows<T>::kLaneBlocks;  // 32-element blocks a step
  // A token's staged x for a step, +64 bytes: with that stride the 8 lanes of a quarter-warp
  // (tokens g, g + 1, lanes t 0..3, whose granules are swizzled by t) read 8 distinct 16-byte
  // bank groups.
  static constexpr int kXRow = kBlocks * 64 + 64;
  static constexpr int kStageBytes = kTokens * kXRow;
  static constexpr int kGranules = kBlocks * 4;  // 16-byte pieces of a token's x a step
  static constexpr int kCopies = kTokens * kGranules / kThreads;  // a thread's, a step
  static_assert(kTokens * kGranules % kThreads == 0, "whole copies per thread");
  static constexpr int kPartBytes = tile_sums_bytes(kRows, kTokens);
  static constexpr int kSmem =
      kStages * kStageBytes > kPartBytes ? kStages* kStageBytes : kPartBytes;
};

// grid (row tiles, token groups of 8*NT, K splits), clusters of (1, 1, splits) when split.
// Each warp: rows warp*MT*16.. of the tile, every token of the group, the split's K range.
template <DType T, int NT, int MT, int P>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    matmul_half_kernel(HalfPlan plan, const __half* xh, int n_tok, int cols) {
  using R = HalfRows<T>;
  using S = HalfShape<T, NT, MT, P>;
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_trigger();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  // (selects, not plan.jobs[j]: a run-time index into the parameters would copy them to local)
  const int j = blockIdx.x < plan.tile_end[0] ? 0 : blockIdx.x < plan.tile_end[1] ? 1 : 2;
  const DeviceWeight w = j == 0 ? plan.jobs[0].w : j == 1 ? plan.jobs[1].w : plan.jobs[2].w;
  float* y = j == 0 ? plan.jobs[0].y : j == 1 ? plan.jobs[1].y : plan.jobs[2].y;
  float* add = j == 0 ? plan.jobs[0].add_to : j == 1 ? plan.jobs[1].add_to : plan.jobs[2].add_to;
  const int64_t d = w.rows, tile = blockIdx.x - (j == 0 ? 0u : plan.tile_end[j - 1]);
  const int64_t tile_row0 = tile * S::kRows, warp_row0 = tile_row0 + warp * (MT * 16);
  const bool live = warp_row0 < d;  // (dead warps still meet every barrier)
  const int tok0 = int(blockIdx.y) * S::kTokens;
  const int total_steps = (cols >> 5) / S::kBlocks, s0 = int(blockIdx.z) * plan.split_steps;
  const int n = min(total_steps, s0 + plan.split_steps) - s0;

  int64_t rows[MT][2];  // rows past d read the last one (never stored)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) rows[mt][h] = min(warp_row0 + mt * 16 + h * 8 + g, d - 1);
  typename R::Row wr[P][MT][2];
  // The weights are constant: their first P steps load before x's producer has finished.
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (p < n)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) R::load(wr[p][mt][h], w, rows[mt][h], (s0 + p) * S::kBlocks, t);

  // x of one step: each token's kBlocks blocks, granule p of block b at b*64 + (p ^ lane)*16.
  // A thread's copies: one granule of every (kThreads / kGranules)-th token. x holds whole
  // groups of 64 tokens (batch_x_half_bytes()), so tokens past n_tok read rows whose products
  // are never stored.
  constexpr int kTokStride = kThreads / S::kGranules;
  static_assert(kThreads % S::kGranules == 0, "a thread's granule is the same in every token");
  const int x_tl = tid / S::kGranules, x_b = tid % S::kGranules >> 2, x_p = tid & 3;
  const __half* x_src =
      xh + size_t(tok0 + x_tl) * cols + size_t(s0 * S::kBlocks + x_b) * 32 + x_p * 8;
  const uint32_t x_dst =
      uint32_t(x_tl * S::kXRow + x_b * 64 + ((x_p ^ ((x_b / R::kLaneBlocks) & 3)) << 4));
  auto stage_x = [&](int step) {
    uint8_t* sx = smem + (step % kStages) * S::kStageBytes + x_dst;
    const __half* src = x_src + size_t(step) * (S::kBlocks * 32);
#pragma unroll
    for (int i = 0; i < S::kCopies; ++i)
      cp_async16(sx + i * kTokStride * S::kXRow, src + size_t(i) * kTokStride * cols);
  };
  pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n) stage_x(s);
    cp_async_commit();
  }

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;

  for (int base = 0; base < n; base += P) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int step = base + p;
      if (step >= n) break;
      cp_async_wait<kStages - 2>();
      __syncthreads();  // step's x is visible; every warp is done with the stage refilled next
      if (step + kStages - 1 < n) stage_x(step + kStages - 1);
      cp_async_commit();
      if (live) {
        const uint8_t* sx = smem + (step % kStages) * S::kStageBytes + g * S::kXRow;
        typename R::Ready k[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) k[mt][h] = R::prep(wr[p][mt][h], t);
#pragma unroll
        for (int c = 0; c < R::kLaneBlocks; ++c)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            uint32_t a[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
              for (int s = 0; s < 2; ++s) {
                R::frag(wr[p][mt][0], k[mt][0], c, q, s, a[mt][s][0], a[mt][s][2]);
                R::frag(wr[p][mt][1], k[mt][1], c, q, s, a[mt][s][1], a[mt][s][3]);
              }
            const uint8_t* xp = sx + (t * R::kLaneBlocks + c) * 64 + ((q ^ t) << 4);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              const uint4 xb = *reinterpret_cast<const uint4*>(xp + nt * 8 * S::kXRow);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                const uint32_t(&a0)[4] = a[mt][0];
                const uint32_t(&a1)[4] = a[mt][1];
                mma_f16(a0[0], a0[1], a0[2], a0[3], xb.x, xb.y, acc[mt][nt]);
                mma_f16(a1[0], a1[1], a1[2], a1[3], xb.z, xb.w, acc[mt][nt]);
              }
            }
          }
      }
      if (step + P < n)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            R::load(wr[p][mt][h], w, rows[mt][h], (s0 + step + P) * S::kBlocks, t);
    }
  }

  if (plan.splits > 1) {  // the x ring becomes the partial sums' buffer
    cp_async_wait<0>();
    __syncthreads();
  }
  store_tile_sums<MT, NT, S::kRows, S::kTokens, kThreads>(acc, live, warp * (MT * 16), tile_row0,
                                                          tok0, d, n_tok, y, add, plan.splits,
                                                          reinterpret_cast<float*>(smem));
}

// The kernel for a dtype and token count, with its shape: MT row tiles a warp and P steps of
// weights in flight, as registers allow (H200, hearth-cuda-bench --batch-only).
struct HalfKernel {
  void (*fn)(HalfPlan, const __half*, int, int) = nullptr;
  int rows = 0, tokens = 0, blocks_per_step = 0, smem = 0;
};

template <DType T, int NT, int MT, int P>
HalfKernel half_kernel() {
  using S = HalfShape<T, NT, MT, P>;
  return {matmul_half_kernel<T, NT, MT, P>, S::kRows, S::kTokens, S::kBlocks, S::kSmem};
}

HalfKernel pick_kernel(DType t, int64_t n_tokens) {
  // Up to 32 tokens two row tiles a warp (x's fragments feed both) and two steps in flight; at
  // 33-64 the accumulators double: one row tile a warp and three steps. Chosen on the H200 with
  // hearth-cuda-bench --batch-only on the 7B shapes among (1-4 tiles) x (1-4 steps).
  const bool wide = n_tokens > 32;
  switch (t) {
    case DType::Q4_0:
      return wide ? half_kernel<DType::Q4_0, 8, 1, 3>() : half_kernel<DType::Q4_0, 4, 2, 2>();
    case DType::Q8_0:
      return wide ? half_kernel<DType::Q8_0, 8, 1, 3>() : half_kernel<DType::Q8_0, 4, 2, 2>();
    case DType::Q4_K:  // (its rows are 48 bytes a lane a step: one row tile, fewer steps)
      return wide ? half_kernel<DType::Q4_K, 8, 1, 1>() : half_kernel<DType::Q4_K, 4, 1, 3>();
    default:
      return {};
  }
}

SplitFit fit_of(const HalfKernel& k) {
  return split_fit(k.fn, kThreads, k.smem);
}

// K splits so that the row tiles times the splits fill the SMs' resident blocks once (each
// split at least two steps).
HalfPlan make_plan(const GemvJob* jobs, int n_jobs, int64_t n_tokens, const HalfKernel& k,
                   const SplitFit& f) {
  HalfPlan p;
  p.n_jobs = n_jobs;
  unsigned end = 0;
  for (int i = 0; i < 3; ++i) {
    if (i < n_jobs) {
      p.jobs[i] = jobs[i];
      end += unsigned((jobs[i].w.rows + k.rows - 1) / k.rows);
    }
    p.tile_end[i] = end;
  }
  const int64_t groups = (n_tokens + k.tokens - 1) / k.tokens;
  const int64_t tiles = int64_t(end) * groups;
  const int steps = int(jobs[0].w.cols / 32 / k.blocks_per_step);
  int64_t splits = f.clusters ? int64_t(f.blocks_per_sm) * device_sm_count() / tiles : 1;
  splits = std::max<int64_t>(1, std::min<int64_t>({splits, kMaxTileSplits, steps / 2}));
  p.split_steps = int((steps + splits - 1) / splits);
  p.splits = (steps + p.split_steps - 1) / p.split_steps;
  return p;
}

}  // namespace

cudaError_t launch_matmul_batch_half(const GemvJob* jobs, int n_jobs, const void* xh,
                                     int64_t n_tokens, int64_t cols, void* workspace,
                                     size_t workspace_bytes, cudaStream_t s) {
  // The copy-engine form checks what it takes (and the tensor maps it encodes) before it
  // launches: where it refuses, the streamed form runs.
  const cudaError_t e = launch_matmul_batch_half_tma(jobs, n_jobs, xh, n_tokens, cols, s);
  if (e != cudaErrorInvalidValue) return e;
  (void)cudaGetLastError();
  return launch_matmul_batch_half_streamed(jobs, n_jobs, xh, n_tokens, cols, workspace,
                                           workspace_bytes, s);
}

cudaError_t launch_matmul_batch_half_norm(const GemvJob& job, const void* xh, int64_t n_tokens,
                                          int64_t cols, void* workspace, size_t workspace_bytes,
                                          cudaStream_t s, const FoldedNorm& norm) {
  // The staged form where the plain product takes it (33-64 tokens over few row tiles: the O
  // and down projections), its K splits' reduction writing the fold; else the copy-engine form.
  if (!matmul_batch_tma_takes(&job, 1, n_tokens, cols) &&
      matmul_batch_staged_norm_takes(job, n_tokens))
    return launch_matmul_batch_half_staged(&job, 1, xh, n_tokens, cols, workspace, workspace_bytes,
                                           s, &norm);
  return launch_matmul_batch_half_tma(&job, 1, xh, n_tokens, cols, s, &norm);
}

cudaError_t launch_matmul_batch_half_streamed(const GemvJob* jobs, int n_jobs, const void* xh,
                                              int64_t n_tokens, int64_t cols, void* workspace,
                                              size_t workspace_bytes, cudaStream_t s) {
  if (matmul_batch_half_staged(jobs, n_jobs, n_tokens))
    return launch_matmul_batch_half_staged(jobs, n_jobs, xh, n_tokens, cols, workspace,
                                           workspace_bytes, s);
  if (!xh || n_jobs < 1 || n_jobs > 3 || n_tokens < kMatmulBatchHalfMinTokens)
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.cols != cols || jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.rows <= 0 ||
        !jobs[i].y || !matmul_batch_supports(jobs[i].w) ||
        (jobs[i].w.dtype == DType::Q4_K && cols % 256 != 0))
      return cudaErrorInvalidValue;
  if (n_tokens * cols >= 0x7fffffff) return cudaErrorInvalidValue;  // (int token indices)
  const HalfKernel k = pick_kernel(jobs[0].w.dtype, n_tokens);
  if (!k.fn) return cudaErrorInvalidValue;
  // Asked of the device once (a function-local static is initialized once, thread-safely): each
  // dtype's two kernels.
  static const SplitFit fits[3][2] = {
      {fit_of(pick_kernel(DType::Q4_0, 32)), fit_of(pick_kernel(DType::Q4_0, 64))},
      {fit_of(pick_kernel(DType::Q8_0, 32)), fit_of(pick_kernel(DType::Q8_0, 64))},
      {fit_of(pick_kernel(DType::Q4_K, 32)), fit_of(pick_kernel(DType::Q4_K, 64))}};
  const DType dt = jobs[0].w.dtype;
  const SplitFit f = fits[dt == DType::Q4_0 ? 0 : dt == DType::Q8_0 ? 1 : 2][n_tokens > 32 ? 1 : 0];
  if (f.blocks_per_sm == 0) return cudaErrorInvalidValue;
  const HalfPlan p = make_plan(jobs, n_jobs, n_tokens, k, f);
  const dim3 grid(p.tile_end[n_jobs - 1], unsigned((n_tokens + k.tokens - 1) / k.tokens),
                  unsigned(p.splits));
  return launch_pdl_clusters(k.fn, grid, dim3(kThreads), size_t(k.smem), s, grid.z, p,
                             static_cast<const __half*>(xh), int(n_tokens), int(cols));
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
