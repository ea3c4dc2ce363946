// Batched decode matmul on the int8 tensor cores: Y [T, d] = X [T, n] @ W^T for a decode step of
// T = 2..kMatmulBatchMaxTokens sequences, each weight byte read once per group of up to 64
// tokens (the one-token GEMV re-reads W per token; cuBLAS needs W dequantized to fp16 per call).
// X arrives quantized as the GEMV's (act-quant.cuh: int8 blocks of 32 with their scales), and
// every 32-element block is one mma.sync m16n8k32 (s8 x s8 -> s32): a block's integer dot is
// exact, the block's weight and x scales are applied to it in f32. New dtype: one BT<>
// specialization (raw load, unpack to two s8 words per row and lane, scale and min).
#include <algorithm>

#include "kernels/cuda/decode-batch.h"
#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/launch.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 4;   // warps per block, each on its own rows
constexpr int kMTiles = 2;  // 16-row MMA tiles per warp: each x fragment feeds 32 rows
constexpr int kBlockRows = kWarps * kMTiles * 16;
constexpr int kStep = 4;       // 32-element blocks per step: every weight load of a step in flight
constexpr int kMaxNTiles = 8;  // 8-token MMA tiles per warp (64 tokens: 64 f32 accumulators)
constexpr int kMaxSplits = 8;  // K splits (blocks over one row tile), summed by reduce_kernel

// One 32-element block of one row as an MMA A fragment: lane (g, t) holds the s8 values of k
// positions 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) of row g (or g + 8), which are the block's
// elements 4t.. and 16+4t.. in ggml order; x's B fragment reads the same positions.
struct AFrag {
  uint32_t lo, hi;
  float d, m;  // value = d * q - m (m: Q4_K's min, times x's block sum)
};

template <DType T>
struct BT;

// Q4_0: 16 body bytes per block, element j in the low nibble of byte j, element j+16 in the high.
template <>
struct BT<DType::Q4_0> {
  static constexpr bool kTwoLevel = false;
  struct Raw {
    uint32_t q;
    uint16_t d;
  };
  static __device__ Raw load(const DeviceWeight& w, int row_blk, int b, int t) {
    const int bi = row_blk + b;
    return {__ldg(reinterpret_cast<const uint32_t*>(w.body) + bi * 4 + t), __ldg(w.aux16 + bi)};
  }
  static __device__ AFrag unpack(const Raw& r, int) {
    return {__vsub4(r.q & 0x0F0F0F0Fu, 0x08080808u), __vsub4((r.q >> 4) & 0x0F0F0F0Fu, 0x08080808u),
            half_bits(r.d), 0.f};
  }
};

// Q8_0: 32 body bytes, element j = byte j. Two-level x (as the GEMV: one level doubles the KLD).
template <>
struct BT<DType::Q8_0> {
  static constexpr bool kTwoLevel = true;
  struct Raw {
    uint32_t q0, q1;
    uint16_t d;
  };
  static __device__ Raw load(const DeviceWeight& w, int row_blk, int b, int t) {
    const int bi = row_blk + b;
    const uint32_t* p = reinterpret_cast<const uint32_t*>(w.body) + size_t(bi) * 8;
    return {__ldg(p + t), __ldg(p + 4 + t), __ldg(w.aux16 + bi)};
  }
  static __device__ AFrag unpack(const Raw& r, int) { return {r.q0, r.q1, half_bits(r.d), 0.f}; }
};

// Q4_K (packed: 128 quant bytes per super-block, heads apart): block b is sub-block j = b % 8,
// in chunk j / 2 of 32 bytes, low nibbles for even j, high for odd; scale and min from the head.
template <>
struct BT<DType::Q4_K> {
  static constexpr bool kTwoLevel = false;
  struct Raw {
    uint32_t q0, q1;
    uint4 h;
  };
  static __device__ Raw load(const DeviceWeight& w, int row_blk, int b, int t) {
    const int bi = row_blk + (b >> 3);
    const uint32_t* p =
        reinterpret_cast<const uint32_t*>(w.body + size_t(bi) * 128 + ((b & 7) >> 1) * 32);
    return {__ldg(p + t), __ldg(p + 4 + t), __ldg(w.aux_head + bi)};
  }
  static __device__ AFrag unpack(const Raw& r, int b) {
    const int j = b & 7, sh = 4 * (j & 1);
    float sc, mn;
    k_scale_min(r.h, j, sc, mn);
    return {(r.q0 >> sh) & 0x0F0F0F0Fu, (r.q1 >> sh) & 0x0F0F0F0Fu, half_bits(r.h.x) * sc,
            half_bits(r.h.x >> 16) * mn};
  }
};

__device__ __forceinline__ void mma_s8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                       int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0),
        "r"(0));
}

// Up to three matrices of one x (Q/K/V, gate/up) in one launch: row tiles of kBlockRows.
struct BatchPlan {
  GemvJob jobs[3];
  unsigned tile_end[3] = {0, 0, 0};
  int64_t row_off[3] = {0, 0, 0};  // rows of the jobs before: each job's slice of `partials`
  int n_jobs = 0;
  int splits = 1;             // gridDim.z
  int split_blocks = 0;       // 32-element blocks per split (a multiple of kStep)
  float* partials = nullptr;  // [splits][T][sum of rows] when splits > 1
};

// grid (row tiles, token groups of 8*NT, splits), block kWarps warps. Warp w of a tile takes rows
// w*32 .. w*32+31 (two MMA tiles) for the group's tokens over the split's blocks.
template <DType T, int NT>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_batch_kernel(BatchPlan plan, QuantizedActs xa) {
  using B = BT<T>;
  pdl_trigger();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  // (selects, not plan.jobs[j]: a run-time index into the parameters would copy them to local)
  const int j = blockIdx.x < plan.tile_end[0] ? 0 : blockIdx.x < plan.tile_end[1] ? 1 : 2;
  const DeviceWeight w = j == 0 ? plan.jobs[0].w : j == 1 ? plan.jobs[1].w : plan.jobs[2].w;
  float* y = j == 0 ? plan.jobs[0].y : j == 1 ? plan.jobs[1].y : plan.jobs[2].y;
  float* add = j == 0 ? plan.jobs[0].add_to : j == 1 ? plan.jobs[1].add_to : plan.jobs[2].add_to;
  const int64_t row_off = j == 0 ? plan.row_off[0] : j == 1 ? plan.row_off[1] : plan.row_off[2];
  const int64_t d = w.rows, tile = blockIdx.x - (j == 0 ? 0u : plan.tile_end[j - 1]);
  const int64_t row_base = tile * kBlockRows + warp * (kMTiles * 16);
  if (row_base >= d) return;
  // Int32 offsets below: launch_matmul_batch checks that every index of W and x fits.
  // This lane's rows: [mt][0] = g, [mt][1] = g + 8 of tile mt (clamped: duplicates never stored),
  // as the index of their first block (Q4_K: super-block).
  int row_blk[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      row_blk[mt][h] = int(min(row_base + mt * 16 + h * 8 + g, d - 1) * w.blocks_per_row);
  const int n_tok = int(xa.n_tokens), cols = int(xa.cols), nb = cols >> 5;
  const int tok0 = int(blockIdx.y) * (NT * 8);
  // This lane's B-fragment token (g) and accumulator tokens (2t, 2t+1) of each N tile, clamped,
  // as offsets into x's quants and scales.
  int xoff[NT], soff[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    xoff[nt] = min(tok0 + nt * 8 + g, n_tok - 1) * cols + 4 * t4;
    soff[nt][0] = min(tok0 + nt * 8 + 2 * t4, n_tok - 1) * nb;
    soff[nt][1] = min(tok0 + nt * 8 + 2 * t4 + 1, n_tok - 1) * nb;
  }
  float acc[kMTiles][NT][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;

  const int kb = int(blockIdx.z) * plan.split_blocks;
  const int ke = min(nb, kb + plan.split_blocks);
  const float4* xs = reinterpret_cast<const float4*>(xa.scales);
  pdl_wait();
  for (int b0 = kb; b0 < ke; b0 += kStep) {
    typename B::Raw raw[kStep][kMTiles][2];
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      const int b = min(b0 + u, ke - 1);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) raw[u][mt][h] = B::load(w, row_blk[mt][h], b, t4);
    }
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      const int b = b0 + u;
      if (b >= ke) break;
      AFrag f[kMTiles][2];
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        f[mt][0] = B::unpack(raw[u][mt][0], b);
        f[mt][1] = B::unpack(raw[u][mt][1], b);
        a[mt][0] = f[mt][0].lo, a[mt][1] = f[mt][1].lo, a[mt][2] = f[mt][0].hi,
        a[mt][3] = f[mt][1].hi;
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int8_t* xq = xa.q1 + xoff[nt] + b * 32;
        const uint32_t b0w = __ldg(reinterpret_cast<const uint32_t*>(xq));
        const uint32_t b1w = __ldg(reinterpret_cast<const uint32_t*>(xq + 16));
        const float4 s0 = __ldg(xs + soff[nt][0] + b), s1 = __ldg(xs + soff[nt][1] + b);
        int c2[kMTiles][4];
        if constexpr (B::kTwoLevel) {
          const int8_t* xq2 = xa.q2 + xoff[nt] + b * 32;
          const uint32_t b0v = __ldg(reinterpret_cast<const uint32_t*>(xq2));
          const uint32_t b1v = __ldg(reinterpret_cast<const uint32_t*>(xq2 + 16));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) mma_s8(a[mt], b0v, b1v, c2[mt]);
        }
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          int c[4];
          mma_s8(a[mt], b0w, b1w, c);
          // c[0], c[1]: row g, tokens 2t, 2t+1; c[2], c[3]: row g + 8.
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const AFrag& fr = f[mt][i >> 1];
            const float4& sx = (i & 1) ? s1 : s0;
            float v = sx.x * float(c[i]);
            if constexpr (B::kTwoLevel) v += sx.y * float(c2[mt][i]);
            acc[mt][nt][i] += fr.d * v - fr.m * sx.w;
          }
        }
      }
    }
  }
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

int ntiles_for(int64_t n_tokens) {
  const int64_t tiles = (n_tokens + 7) / 8;
  return tiles <= 1 ? 1 : tiles <= 2 ? 2 : tiles <= 4 ? 4 : kMaxNTiles;
}

int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
    return 132;
  return n;
}

// Tiles, splits and partial offsets for these jobs (the launch and the workspace size agree).
BatchPlan make_plan(const GemvJob* jobs, int n_jobs, int64_t n_tokens) {
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
  int64_t splits = (4 * int64_t(sm_count()) + blocks - 1) / blocks;
  splits = std::max<int64_t>(1, std::min<int64_t>({splits, kMaxSplits, nb / (2 * kStep)}));
  const int64_t per = (nb + splits - 1) / splits;
  p.split_blocks = int((per + kStep - 1) / kStep * kStep);
  p.splits = int((nb + p.split_blocks - 1) / p.split_blocks);
  return p;
}

template <DType T, int NT>
cudaError_t launch_typed(const BatchPlan& p, const QuantizedActs& xa, cudaStream_t s) {
  const dim3 grid(p.tile_end[p.n_jobs - 1], unsigned((xa.n_tokens + NT * 8 - 1) / (NT * 8)),
                  unsigned(p.splits));
  return launch_pdl(matmul_batch_kernel<T, NT>, grid, dim3(kWarps * 32), 0, s, p, xa);
}

template <DType T>
cudaError_t launch_by_tokens(const BatchPlan& p, const QuantizedActs& xa, cudaStream_t s) {
  switch (ntiles_for(xa.n_tokens)) {
    case 1:
      return launch_typed<T, 1>(p, xa, s);
    case 2:
      return launch_typed<T, 2>(p, xa, s);
    case 4:
      return launch_typed<T, 4>(p, xa, s);
    default:
      return launch_typed<T, kMaxNTiles>(p, xa, s);
  }
}

}  // namespace

bool matmul_batch_supports(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K;
}

size_t matmul_batch_workspace_bytes(const GemvJob* jobs, int n_jobs, int64_t n_tokens) {
  const BatchPlan p = make_plan(jobs, n_jobs, n_tokens);
  if (p.splits == 1) return 0;
  int64_t rows = 0;
  for (int i = 0; i < n_jobs; ++i) rows += jobs[i].w.rows;
  return size_t(p.splits) * size_t(n_tokens) * size_t(rows) * sizeof(float);
}

cudaError_t launch_matmul_batch(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa,
                                void* workspace, size_t workspace_bytes, cudaStream_t s) {
  if (n_jobs < 1 || n_jobs > 3 || xa.n_tokens < 1 || xa.n_tokens > kMatmulBatchMaxTokens ||
      !matmul_batch_supports(jobs[0].w.dtype))
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.cols != xa.cols || jobs[i].w.dtype != jobs[0].w.dtype || jobs[i].w.rows <= 0 ||
        !jobs[i].y)
      return cudaErrorInvalidValue;
  // The kernel indexes blocks of W and elements of x in int32.
  constexpr int64_t kIntMax = 0x7fffffff;
  if (xa.n_tokens * xa.cols >= kIntMax) return cudaErrorInvalidValue;
  for (int i = 0; i < n_jobs; ++i)
    if (jobs[i].w.rows * jobs[i].w.blocks_per_row * 8 >= kIntMax) return cudaErrorInvalidValue;
  BatchPlan p = make_plan(jobs, n_jobs, xa.n_tokens);
  if (p.splits > 1) {
    if (workspace_bytes < matmul_batch_workspace_bytes(jobs, n_jobs, xa.n_tokens) || !workspace)
      return cudaErrorInvalidValue;
    p.partials = static_cast<float*>(workspace);
  }
  cudaError_t e = cudaErrorInvalidValue;
  switch (jobs[0].w.dtype) {
    case DType::Q4_0:
      e = launch_by_tokens<DType::Q4_0>(p, xa, s);
      break;
    case DType::Q8_0:
      e = launch_by_tokens<DType::Q8_0>(p, xa, s);
      break;
    case DType::Q4_K:
      e = launch_by_tokens<DType::Q4_K>(p, xa, s);
      break;
    default:
      break;
  }
  if (e != cudaSuccess || p.splits == 1) return e;
  int64_t total = 0;
  for (int i = 0; i < n_jobs; ++i) total += xa.n_tokens * jobs[i].w.rows;
  return launch_pdl(reduce_kernel, dim3(unsigned((total + 255) / 256)), dim3(256), 0, s, p,
                    xa.n_tokens);
}

}  // namespace hearth::cuda
