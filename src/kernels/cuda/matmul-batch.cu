// Batched decode matmul on the int8 tensor cores: Y [T, d] = X [T, n] @ W^T for a decode step of
// T = 2..kMatmulBatchMaxTokens sequences, each weight byte read once per group of up to 64
// tokens (the one-token GEMV re-reads W per token; cuBLAS needs W dequantized to fp16 per call).
// X arrives quantized as the GEMV's (act-quant.cuh: int8 blocks of 32 with their scales), and
// every 32-element block is one mma.sync m16n8k32 (s8 x s8 -> s32): a block's integer dot is
// exact, the block's weight and x scales are applied to it in f32.
// A block's weight rows and the tokens' x for the next steps stream into shared memory with
// 16-byte cp.async copies (a ring of stages), and fragments are read from there: direct 4-byte
// loads of 8 rows at a time kept the L1 pipeline, not DRAM, saturated (~500 GB/s at B = 8-32).
// Where matmul_batch_half_staged() picks it (above kMatmulBatchStreamedMaxTokens tokens, and at
// 33-64 over few row tiles; else matmul-batch-half.cu's streamed form) the same kernel runs fp16
// MMAs instead (m16n8k16, f32 accumulators): each lane dequantizes its weight fragment to fp16
// once for all the tokens, x comes as fp16 (launch_batch_x_half), and no per-block scale
// epilogue is left, which at 16+ tokens is what bounded the int8 form (3 FP32 instructions per
// row, token and block).
// New dtype: one BT<> specialization in matmul-batch-stage.cuh (what a row's step of 4 blocks
// is in memory, and how a lane's int8 fragment, scale and min, or its fp16 fragment, come out of
// its staged bytes).
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cp-async.cuh"
#include "kernels/cuda/decode-batch.h"
#include "kernels/cuda/folded-norm.cuh"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul-batch-stage.cuh"

namespace hearth::cuda {

namespace {

using batch_stage::AFrag;
using batch_stage::BT;

constexpr int kWarps = 4;  // warps per block, each on its own rows
constexpr int kThreads = kWarps * 32;
constexpr int kMTiles = 2;  // 16-row MMA tiles per warp: each x fragment feeds 32 rows
// (4: 256-row blocks, slower at every B on the H200)
constexpr int kBlockRows = kWarps * kMTiles * 16;
constexpr int kStep = 4;       // 32-element blocks per stage (cols % 128 == 0)
constexpr int kMaxNTiles = 8;  // 8-token MMA tiles per warp (64 tokens: 64 f32 accumulators)
constexpr int kMaxSplits = 8;  // K splits (blocks over one row tile), summed by reduce_kernel
// A token's staged x: 128 quant bytes (+16: its 8 rows' lanes hit distinct banks), and its four
// blocks' float4 scales (+16 for the same reason); in fp16, 256 bytes (+32: a half-warp's 8-byte
// reads of 4 tokens then land in distinct banks).
constexpr int kXqStride = 144;
constexpr int kXsStride = 80;
constexpr int kXhStride = 288;

// The accumulator starts at 0x4B400000 (1.5 * 2^23 as a float's bits): the s32 result then reads
// as the float 1.5 * 2^23 + dot exactly (|dot| <= 32 * 128 * 127 < 2^22), and one full-rate add
// recovers dot, where an int-to-float conversion runs at a quarter of the FP32 rate.
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

__device__ __forceinline__ void mma_s8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                       float (&c)[4]) {
  int r[4];
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kMagicBits),
        "r"(kMagicBits), "r"(kMagicBits), "r"(kMagicBits));
#pragma unroll
  for (int i = 0; i < 4; ++i) c[i] = __int_as_float(r[i]) - kMagic;
}

// Up to three matrices of one x (Q/K/V, gate/up) in one launch: row tiles of kBlockRows.
struct BatchPlan {
  GemvJob jobs[3];
  unsigned tile_end[3] = {0, 0, 0};
  int64_t row_off[3] = {0, 0, 0};  // rows of the jobs before: each job's slice of `partials`
  int n_jobs = 0;
  int splits = 1;             // gridDim.z
  int split_blocks = 0;       // 32-element blocks per split (a multiple of kStep)
  bool deep = false;          // the fp16 form two steps ahead (StageShape::kStages)
  float* partials = nullptr;  // [splits][T][sum of rows] when splits > 1
};

// Stages in flight per block, and the shared memory one stage takes.
template <DType T, int NT, bool kHalf, bool kDeep>
struct StageShape {
  // kDeep (the fp16 form, one group of 64 tokens over few row tiles: deep_splits()): two steps
  // ahead in flight instead of one.
  static constexpr int kStages = kDeep || NT <= 4 ? 3 : 2;
  static constexpr int kTokens = NT * 8;
  static constexpr int kWBytes = kBlockRows * BT<T>::kStride;
  static constexpr int kXqBytes = kTokens * kXqStride;  // per level
  static constexpr int kXBytes =
      kHalf ? kTokens * kXhStride : kXqBytes * (BT<T>::kTwoLevel ? 2 : 1) + kTokens * kXsStride;
  static constexpr int kBytes = kWBytes + kXBytes;
  static constexpr int kSmem = kStages * kBytes;
};

// grid (row tiles, token groups of 8*NT, splits), block kWarps warps. The block stages its 128
// rows and the group's tokens for each step of 4 blocks; warp w then takes rows w*32 .. w*32+31
// (two MMA tiles) for every token of the group. kHalf: x is xh (fp16, launch_batch_x_half's
// order; xa gives only its shape) and the MMAs are fp16 ones.
template <DType T, int NT, bool kHalf, bool kDeep>
__global__ void __launch_bounds__(kThreads)
    matmul_batch_kernel(BatchPlan plan, QuantizedActs xa, const __half* xh) {
  using B = BT<T>;
  using S = StageShape<T, NT, kHalf, kDeep>;
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_trigger();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  // (selects, not plan.jobs[j]: a run-time index into the parameters would copy them to local)
  const int j = blockIdx.x < plan.tile_end[0] ? 0 : blockIdx.x < plan.tile_end[1] ? 1 : 2;
  const DeviceWeight w = j == 0 ? plan.jobs[0].w : j == 1 ? plan.jobs[1].w : plan.jobs[2].w;
  float* y = j == 0 ? plan.jobs[0].y : j == 1 ? plan.jobs[1].y : plan.jobs[2].y;
  float* add = j == 0 ? plan.jobs[0].add_to : j == 1 ? plan.jobs[1].add_to : plan.jobs[2].add_to;
  const int64_t row_off = j == 0 ? plan.row_off[0] : j == 1 ? plan.row_off[1] : plan.row_off[2];
  const int64_t d = w.rows, tile = blockIdx.x - (j == 0 ? 0u : plan.tile_end[j - 1]);
  const int64_t tile_row0 = tile * kBlockRows, row_base = tile_row0 + warp * (kMTiles * 16);
  const int n_tok = int(xa.n_tokens), cols = int(xa.cols), nb = cols >> 5;
  const int tok0 = int(blockIdx.y) * S::kTokens;
  const int kb = int(blockIdx.z) * plan.split_blocks;
  const int n_steps = (min(nb, kb + plan.split_blocks) - kb) / kStep;

  // Rows past d and tokens past n_tok stage their last valid one (never stored).
  auto stage_w = [&](int step) {
    uint8_t* sw = smem + (step % S::kStages) * S::kBytes;
    const int b0 = kb + step * kStep;
    constexpr int kChunks = B::kBody / 16;
    for (int c = tid; c < kBlockRows * kChunks; c += kThreads) {
      const int r = c / kChunks, part = c % kChunks;
      cp_async16(sw + r * B::kStride + part * 16,
                 B::body(w, min(tile_row0 + r, d - 1), b0) + part * 16);
    }
    for (int r = tid; r < kBlockRows; r += kThreads)
      B::stage_aux(sw + r * B::kStride + B::kBody, w, min(tile_row0 + r, d - 1), b0);
  };
  auto stage_x = [&](int step) {
    uint8_t* sx = smem + (step % S::kStages) * S::kBytes + S::kWBytes;
    const int b0 = kb + step * kStep;
    if constexpr (kHalf) {
      for (int c = tid; c < S::kTokens * 16; c += kThreads) {
        const int tl = c >> 4, part = c & 15;
        const __half* src = xh + size_t(min(tok0 + tl, n_tok - 1)) * cols + size_t(b0) * 32;
        cp_async16(sx + tl * kXhStride + part * 16,
                   reinterpret_cast<const uint8_t*>(src) + part * 16);
      }
    } else {
      for (int c = tid; c < S::kTokens * 8; c += kThreads) {
        const int tl = c >> 3, part = c & 7;
        const size_t off = size_t(min(tok0 + tl, n_tok - 1)) * cols + size_t(b0) * 32 + part * 16;
        cp_async16(sx + tl * kXqStride + part * 16, xa.q1 + off);
        if constexpr (B::kTwoLevel)
          cp_async16(sx + S::kXqBytes + tl * kXqStride + part * 16, xa.q2 + off);
      }
      uint8_t* ss = sx + S::kXqBytes * (B::kTwoLevel ? 2 : 1);
      for (int c = tid; c < S::kTokens * kStep; c += kThreads) {
        const int tl = c >> 2, part = c & 3;
        cp_async16(ss + tl * kXsStride + part * 16,
                   xa.scales + (size_t(min(tok0 + tl, n_tok - 1)) * nb + b0 + part) * 4);
      }
    }
  };

  float acc[kMTiles][NT][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;

  // The weights are constant: their first stages load before the previous kernel (x's producer)
  // has finished.
  for (int s = 0; s < S::kStages - 1; ++s)
    if (s < n_steps) stage_w(s);
  pdl_wait();
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < n_steps) stage_x(s);
    cp_async_commit();
  }
  for (int step = 0; step < n_steps; ++step) {
    cp_async_wait<S::kStages - 2>();
    __syncthreads();  // step's stage is visible; every warp is done with the one refilled next
    if (step + S::kStages - 1 < n_steps) {
      stage_w(step + S::kStages - 1);
      stage_x(step + S::kStages - 1);
    }
    cp_async_commit();
    if (row_base >= d) continue;  // (still at every barrier)
    const uint8_t* sw = smem + (step % S::kStages) * S::kBytes;
    const uint8_t* sx = sw + S::kWBytes;
    const uint8_t* ss = sx + S::kXqBytes * (B::kTwoLevel ? 2 : 1);
    const int b0 = kb + step * kStep;
    if constexpr (kHalf) {
#pragma unroll
      for (int u = 0; u < kStep; ++u) {
        __half2 hf[kMTiles][2][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            B::frag_h(sw + (warp * kMTiles * 16 + mt * 16 + h * 8 + g) * B::kStride, u, t4, b0,
                      hf[mt][h]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint8_t* xp = sx + (nt * 8 + g) * kXhStride + u * 64 + 8 * t4;
          const uint2 x1 = *reinterpret_cast<const uint2*>(xp);       // elements 4t..
          const uint2 x2 = *reinterpret_cast<const uint2*>(xp + 32);  // 16 + 4t..
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_f16(bits_h2(hf[mt][0][0]), bits_h2(hf[mt][1][0]), bits_h2(hf[mt][0][1]),
                    bits_h2(hf[mt][1][1]), x1.x, x1.y, acc[mt][nt]);
            mma_f16(bits_h2(hf[mt][0][2]), bits_h2(hf[mt][1][2]), bits_h2(hf[mt][0][3]),
                    bits_h2(hf[mt][1][3]), x2.x, x2.y, acc[mt][nt]);
          }
        }
      }
    } else {
#pragma unroll
      for (int u = 0; u < kStep; ++u) {
        AFrag f[kMTiles][2];
        uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h)
            f[mt][h] =
                B::frag(sw + (warp * kMTiles * 16 + mt * 16 + h * 8 + g) * B::kStride, u, t4, b0);
          a[mt][0] = f[mt][0].lo, a[mt][1] = f[mt][1].lo, a[mt][2] = f[mt][0].hi,
          a[mt][3] = f[mt][1].hi;
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint8_t* xq = sx + (nt * 8 + g) * kXqStride + u * 32 + 4 * t4;
          const uint32_t b0w = *reinterpret_cast<const uint32_t*>(xq);
          const uint32_t b1w = *reinterpret_cast<const uint32_t*>(xq + 16);
          const float4 s0 =
              *reinterpret_cast<const float4*>(ss + (nt * 8 + 2 * t4) * kXsStride + u * 16);
          const float4 s1 =
              *reinterpret_cast<const float4*>(ss + (nt * 8 + 2 * t4 + 1) * kXsStride + u * 16);
          float c2[kMTiles][4];
          if constexpr (B::kTwoLevel) {
            const uint8_t* xq2 = xq + S::kXqBytes;
            const uint32_t b0v = *reinterpret_cast<const uint32_t*>(xq2);
            const uint32_t b1v = *reinterpret_cast<const uint32_t*>(xq2 + 16);
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) mma_s8(a[mt], b0v, b1v, c2[mt]);
          }
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            float c[4];
            mma_s8(a[mt], b0w, b1w, c);
            // c[0], c[1]: row g, tokens 2t, 2t+1; c[2], c[3]: row g + 8. Per element: the scale
            // product and one FMA (two for a second x level or a min): the epilogue, not the
            // MMA, is what the FP32 pipe spends most on at 32 tokens and more.
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const AFrag& fr = f[mt][i >> 1];
              const float4& sx4 = (i & 1) ? s1 : s0;
              float a_acc = fmaf(fr.d * sx4.x, c[i], acc[mt][nt][i]);
              if constexpr (B::kTwoLevel) a_acc = fmaf(fr.d * sx4.y, c2[mt][i], a_acc);
              if constexpr (B::kMin) a_acc = fmaf(-fr.m, sx4.w, a_acc);
              acc[mt][nt][i] = a_acc;
            }
          }
        }
      }
    }
  }
  if (row_base >= d) return;
  // Stores: straight to y (and the residual) with one split, else this split's partial sums.
  const bool direct = plan.splits == 1;
  float* out =
      direct ? y : plan.partials + plan.splits * n_tok * row_off + int64_t(blockIdx.z) * n_tok * d;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = row_base + mt * 16 + (i >> 1) * 8 + g;
        const int tok = tok0 + nt * 8 + 2 * t4 + (i & 1);
        if (row >= d || tok >= n_tok) continue;
        out[tok * d + row] = acc[mt][nt][i];
        if (direct && add) add[tok * d + row] += acc[mt][nt][i];
      }
}

// y = the splits' sum (in split order: deterministic), add_to += y. One thread per output.
__global__ void reduce_kernel(BatchPlan plan, int64_t n_tok) {
  pdl_trigger();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t base = 0;
  for (int j = 0; j < plan.n_jobs; ++j) {
    const int64_t n = n_tok * plan.jobs[j].w.rows;
    if (i < base + n) {
      const int64_t e = i - base;
      const float* p = plan.partials + plan.splits * n_tok * plan.row_off[j] + e;
      float v = 0.f;
      for (int s = 0; s < plan.splits; ++s) v += p[int64_t(s) * n];
      plan.jobs[j].y[e] = v;
      if (plan.jobs[j].add_to) plan.jobs[j].add_to[e] += v;
      return;
    }
    base += n;
  }
}

// reduce_kernel for the first matmul of a folded RMSNorm (decode-batch.h FoldedNorm; one job
// adding to the residual): per (token, 4 rows) the splits' sum in split order (reduce_kernel's
// bits), the residual and next_xh as the copy-engine form's store_norm_sums writes them. A warp's
// 32 quads are one token's 128-row tile, so its shuffle sum is the tile's sum of squares.
__global__ void reduce_norm_kernel(BatchPlan plan, int64_t n_tok, FoldedNorm nm) {
  pdl_trigger();
  pdl_wait();
  constexpr int kTileRows = 128;
  const int64_t d = plan.jobs[0].w.rows;
  const int64_t tiles = (d + kTileRows - 1) / kTileRows;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = int(threadIdx.x) & 31;
  if (warp >= n_tok * tiles) return;  // (whole warps)
  const int64_t tok = warp / tiles, tile = warp % tiles;
  const int64_t row = tile * kTileRows + lane * 4;
  float ss = 0.f;
  if (row < d) {  // (d % 4 == 0: a quad is whole or absent)
    const int64_t e = tok * d + row, n = n_tok * d;
    float4 v = *reinterpret_cast<const float4*>(plan.partials + e);
    for (int s = 1; s < plan.splits; ++s) {
      const float4 o = *reinterpret_cast<const float4*>(plan.partials + int64_t(s) * n + e);
      v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
    }
    ss = store_norm_quad(v, tok, row, d, plan.jobs[0].y, plan.jobs[0].add_to, nm);
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) nm.ss[tok * tiles + tile] = ss;
}

// 8-token tiles a token group takes. Above one group (64 tokens) the groups are balanced: 96
// tokens are two groups of 48, not 64 and 32 (the second group's blocks did a 64-token group's
// MMAs for 32 tokens: H200, Q4_0, 96 tokens took 27.4 us at 4096x4096 against 24.8 for 128).
int ntiles_for(int64_t n_tokens) {
  const int64_t tiles = (n_tokens + 7) / 8;
  if (tiles > kMaxNTiles) {
    const int64_t groups = (tiles + kMaxNTiles - 1) / kMaxNTiles;
    return int((tiles + groups - 1) / groups);
  }
  return tiles <= 1 ? 1 : tiles <= 2 ? 2 : tiles <= 4 ? 4 : kMaxNTiles;
}

// Blocks of the deep kernel (fp16, one group of 64 tokens) an SM holds at once, asked of the
// device once per dtype (0: it cannot run).
template <DType T>
int deep_resident_blocks() {
  static const int n = [] {
    constexpr int smem = StageShape<T, kMaxNTiles, true, true>::kSmem;
    const auto kernel = matmul_batch_kernel<T, kMaxNTiles, true, true>;
    int b = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, size_t(smem)) !=
            cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return b;
  }();
  return n;
}

int64_t row_tiles(const GemvJob* jobs, int n_jobs) {
  int64_t tiles = 0;
  for (int i = 0; i < n_jobs; ++i) tiles += (jobs[i].w.rows + kBlockRows - 1) / kBlockRows;
  return tiles;
}

// The deep kernel's K splits for these jobs, or 0 where it is not the one to run. It runs one
// wave (a second would start its weight reads only as the first ends), so it pays where few row
// tiles leave room for 4+ splits; H200, Q4_0, B = 64, us, deep against the streamed form:
// 4096x4096 15.1 / 19.8, 4096x11008 29.1 / 41.6, but 11008x4096 (3 splits) 31.9 / 30.8 and
// gate+up of 7B (2 x 11008 rows, 1 split) slower still.
int deep_splits(const GemvJob* jobs, int n_jobs, int64_t n_tokens) {
  // (one group of 33-64 tokens: kMaxNTiles 8-token tiles, the only deep instances)
  if (n_tokens <= kMaxNTiles * 4 || n_tokens > kMaxNTiles * 8) return 0;
  int per_sm = 0;
  switch (jobs[0].w.dtype) {
    case DType::Q4_0:
      per_sm = deep_resident_blocks<DType::Q4_0>();
      break;
    case DType::Q8_0:
      per_sm = deep_resident_blocks<DType::Q8_0>();
      break;
    case DType::Q4_K:
      per_sm = deep_resident_blocks<DType::Q4_K>();
      break;
    default:
      return 0;
  }
  const int64_t steps = jobs[0].w.cols / 32 / kStep;  // (each split >= 2 steps)
  const int64_t splits = std::min<int64_t>(
      {per_sm * int64_t(device_sm_count()) / row_tiles(jobs, n_jobs), kMaxSplits, steps / 2});
  return splits >= 4 ? int(splits) : 0;
}

// Tiles, splits and partial offsets for these jobs (the launch and the workspace size agree).
// half: the fp16 form (the deep kernel where deep_splits() picks it).
BatchPlan make_plan(const GemvJob* jobs, int n_jobs, int64_t n_tokens, bool half) {
  BatchPlan p;
  p.n_jobs = n_jobs;
  unsigned end = 0;
  int64_t rows = 0;
  for (int i = 0; i < 3; ++i) {
    if (i < n_jobs) {
      p.jobs[i] = jobs[i];
      p.row_off[i] = rows;
      rows += jobs[i].w.rows;
      end += unsigned((jobs[i].w.rows + kBlockRows - 1) / kBlockRows);
    }
    p.tile_end[i] = end;
  }
  const int64_t groups = (n_tokens + ntiles_for(n_tokens) * 8 - 1) / (ntiles_for(n_tokens) * 8);
  const int64_t blocks = int64_t(end) * groups, nb = jobs[0].w.cols / 32;
  // Enough blocks for four per SM (memory-bound: loads in flight), each split >= 2 steps.
  const int deep = half ? deep_splits(jobs, n_jobs, n_tokens) : 0;
  p.deep = deep > 0;
  int64_t splits = deep > 0 ? deep : (4 * int64_t(device_sm_count()) + blocks - 1) / blocks;
  splits = std::max<int64_t>(1, std::min<int64_t>({splits, kMaxSplits, nb / (2 * kStep)}));
  const int64_t per = (nb + splits - 1) / splits;
  p.split_blocks = int((per + kStep - 1) / kStep * kStep);
  p.splits = int((nb + p.split_blocks - 1) / p.split_blocks);
  return p;
}

// The partial sums a plan's K splits write (0: one split), [splits][T][sum of rows].
size_t split_partials_bytes(const BatchPlan& p, int64_t n_tokens) {
  if (p.splits == 1) return 0;
  int64_t rows = 0;
  for (int i = 0; i < p.n_jobs; ++i) rows += p.jobs[i].w.rows;
  return size_t(p.splits) * size_t(n_tokens) * size_t(rows) * sizeof(float);
}

template <DType T, int NT, bool kHalf, bool kDeep = false>
cudaError_t launch_typed(const BatchPlan& p, const QuantizedActs& xa, const __half* xh,
                         cudaStream_t s) {
  const dim3 grid(p.tile_end[p.n_jobs - 1], unsigned((xa.n_tokens + NT * 8 - 1) / (NT * 8)),
                  unsigned(p.splits));
  constexpr int smem = StageShape<T, NT, kHalf, kDeep>::kSmem;
  // Above 48 KiB a kernel must opt in, once (a function-local static: thread-safe).
  static const cudaError_t opted = cudaFuncSetAttribute(
      matmul_batch_kernel<T, NT, kHalf, kDeep>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (opted != cudaSuccess) return opted;
  return launch_pdl(matmul_batch_kernel<T, NT, kHalf, kDeep>, grid, dim3(kThreads), size_t(smem), s,
                    p, xa, xh);
}

template <DType T, bool kHalf>
cudaError_t launch_by_tokens(const BatchPlan& p, const QuantizedActs& xa, const __half* xh,
                             cudaStream_t s) {
  switch (ntiles_for(xa.n_tokens)) {
    case 1:
      if constexpr (kHalf)
        return cudaErrorInvalidValue;  // (from 16 tokens: 2 tiles or more)
      else
        return launch_typed<T, 1, false>(p, xa, xh, s);
    case 2:
      return launch_typed<T, 2, kHalf>(p, xa, xh, s);
    case 4:
      return launch_typed<T, 4, kHalf>(p, xa, xh, s);
    // (5-7: balanced groups above 64 tokens, always the fp16 form)
    case 5:
      if constexpr (kHalf) return launch_typed<T, 5, true>(p, xa, xh, s);
      return cudaErrorInvalidValue;
    case 6:
      if constexpr (kHalf) return launch_typed<T, 6, true>(p, xa, xh, s);
      return cudaErrorInvalidValue;
    case 7:
      if constexpr (kHalf) return launch_typed<T, 7, true>(p, xa, xh, s);
      return cudaErrorInvalidValue;
    default:
      if constexpr (kHalf)
        if (p.deep) return launch_typed<T, kMaxNTiles, true, true>(p, xa, xh, s);
      return launch_typed<T, kMaxNTiles, kHalf>(p, xa, xh, s);
  }
}

template <bool kHalf>
cudaError_t launch_dtype(DType t, const BatchPlan& p, const QuantizedActs& xa, const __half* xh,
                         cudaStream_t s) {
  switch (t) {
    case DType::Q4_0:
      return launch_by_tokens<DType::Q4_0, kHalf>(p, xa, xh, s);
    case DType::Q8_0:
      return launch_by_tokens<DType::Q8_0, kHalf>(p, xa, xh, s);
    case DType::Q4_K:
      return launch_by_tokens<DType::Q4_K, kHalf>(p, xa, xh, s);
    default:
      return cudaErrorInvalidValue;
  }
}

bool aligned(const void* p, uintptr_t a) {
  return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0;
}

// What reduce_norm_kernel needs of a plan: K splits, one job adding to the residual, whole
// 4-row quads, 16-byte rows (float4 / 8-byte fp16 stores).
bool staged_norm_takes(const BatchPlan& p, const GemvJob& job) {
  return p.n_jobs == 1 && p.splits > 1 && job.y && job.add_to && job.w.rows % 4 == 0 &&
         aligned(job.y, 16) && aligned(job.add_to, 16);
}
bool norm_first_ok(const FoldedNorm& nm) {
  return nm.w && aligned(nm.w, 16) && nm.s && nm.next_xh && aligned(nm.next_xh, 8) && nm.ss &&
         !nm.ss_in;
}

// x's halves in the fp16 fragments' order (batch_half_index(), four at a time: of every 4, the
// middle two swapped).
__global__ void batch_x_half_kernel(const float4* __restrict__ x, int64_t n4,
                                    __half2* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = x[i];
    out[2 * i] = __floats2half2_rn(v.x, v.z);
    out[2 * i + 1] = __floats2half2_rn(v.y, v.w);
  }
}

// The checks and plan shared by both forms; xh set: the fp16 one. norm: the first matmul of a
// folded RMSNorm, which only a plan with K splits takes (its reduction writes the fold).
cudaError_t launch_batch(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa, const __half* xh,
                         void* workspace, size_t workspace_bytes, cudaStream_t s,
                         const FoldedNorm* norm = nullptr) {
  if (n_jobs < 1 || n_jobs > 3 || xa.n_tokens < 1 || xa.n_tokens > kMatmulBatchMaxTokens ||
      (xh && xa.n_tokens < kMatmulBatchHalfMinTokens))
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.cols != xa.cols || jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.rows <= 0 ||
        !jobs[i].y || !matmul_batch_supports(jobs[i].w))
      return cudaErrorInvalidValue;
  // The kernel indexes blocks of W and elements of x in int32.
  constexpr int64_t kIntMax = 0x7fffffff;
  if (xa.n_tokens * xa.cols >= kIntMax) return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.rows * jobs[i].w.blocks_per_row * 8 >= kIntMax) return cudaErrorInvalidValue;
  BatchPlan p = make_plan(jobs, n_jobs, xa.n_tokens, xh != nullptr);
  if (norm && (!staged_norm_takes(p, jobs[0]) || !norm_first_ok(*norm)))
    return cudaErrorInvalidValue;
  if (p.splits > 1) {
    if (workspace_bytes < split_partials_bytes(p, xa.n_tokens) || !workspace)
      return cudaErrorInvalidValue;
    p.partials = static_cast<float*>(workspace);
  }
  const cudaError_t e = xh ? launch_dtype<true>(jobs[0].w.dtype, p, xa, xh, s)
                           : launch_dtype<false>(jobs[0].w.dtype, p, xa, nullptr, s);
  if (e != cudaSuccess || p.splits == 1) return e;
  if (norm) {
    const int64_t warps = xa.n_tokens * ((jobs[0].w.rows + 127) / 128);
    return launch_pdl(reduce_norm_kernel, dim3(unsigned((warps + 7) / 8)), dim3(256), 0, s, p,
                      xa.n_tokens, *norm);
  }
  int64_t total = 0;
  for (int i = 0; i < n_jobs; ++i) total += xa.n_tokens * jobs[i].w.rows;
  return launch_pdl(reduce_kernel, dim3(unsigned((total + 255) / 256)), dim3(256), 0, s, p,
                    xa.n_tokens);
}

}  // namespace

bool matmul_batch_supports(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K;
}

bool matmul_batch_supports(const DeviceWeight& w) {
  // Whole stages of 4 blocks per row, and the 16-byte (scales: 8-byte) copies aligned.
  if (!matmul_batch_supports(w.dtype) || w.cols % 128 != 0 || !aligned(w.body, 16)) return false;
  return w.dtype == DType::Q4_K ? aligned(w.aux_head, 16) : aligned(w.aux16, 8);
}

size_t matmul_batch_workspace_bytes(const GemvJob* jobs, int n_jobs, int64_t n_tokens) {
  const bool half = n_tokens >= kMatmulBatchHalfMinTokens;
  const BatchPlan p = make_plan(jobs, n_jobs, n_tokens, half);
  // (the streamed fp16 form, where it runs, adds its K splits up in shared memory)
  const bool streamed = half && n_tokens <= kMatmulBatchStreamedMaxTokens && !p.deep;
  return streamed ? 0 : split_partials_bytes(p, n_tokens);
}

bool matmul_batch_half_staged(const GemvJob* jobs, int n_jobs, int64_t n_tokens) {
  return n_tokens > kMatmulBatchStreamedMaxTokens || deep_splits(jobs, n_jobs, n_tokens) > 0;
}

cudaError_t launch_matmul_batch(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa,
                                void* workspace, size_t workspace_bytes, cudaStream_t s) {
  if (!xa.q1) return cudaErrorInvalidValue;
  return launch_batch(jobs, n_jobs, xa, nullptr, workspace, workspace_bytes, s);
}

size_t batch_x_half_bytes(int64_t n_tokens, int64_t cols) {
  // Whole groups of 64 tokens: the register-streamed form reads a group's rows unclamped.
  return size_t((n_tokens + 63) / 64 * 64) * size_t(cols) * sizeof(__half);
}

cudaError_t launch_batch_x_half(const float* x, int64_t n_tokens, int64_t cols, void* out,
                                cudaStream_t s) {
  if (n_tokens < 1 || cols % 4 != 0) return cudaErrorInvalidValue;
  const int64_t n4 = n_tokens * cols / 4;
  const unsigned blocks = unsigned(std::min<int64_t>((n4 + 255) / 256, 2048));
  batch_x_half_kernel<<<blocks, 256, 0, s>>>(reinterpret_cast<const float4*>(x), n4,
                                             static_cast<__half2*>(out));
  return cudaGetLastError();
}

cudaError_t launch_matmul_batch_half_staged(const GemvJob* jobs, int n_jobs, const void* xh,
                                            int64_t n_tokens, int64_t cols, void* workspace,
                                            size_t workspace_bytes, cudaStream_t s,
                                            const FoldedNorm* norm) {
  if (!xh) return cudaErrorInvalidValue;
  QuantizedActs shape;
  shape.n_tokens = n_tokens, shape.cols = cols;
  return launch_batch(jobs, n_jobs, shape, static_cast<const __half*>(xh), workspace,
                      workspace_bytes, s, norm);
}

bool matmul_batch_staged_norm_takes(const GemvJob& job, int64_t n_tokens) {
  if (n_tokens < kMatmulBatchHalfMinTokens || n_tokens > kMatmulBatchMaxTokens ||
      !matmul_batch_supports(job.w) || !matmul_batch_half_staged(&job, 1, n_tokens))
    return false;
  return staged_norm_takes(make_plan(&job, 1, n_tokens, true), job);
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
