// The batched decode matmul's copy-engine form (sm_90): Y [T, d] = X [T, n] @ W^T for a decode
// step of 17-64 sequences of Q4_0 or Q4_K weights on m16n8k16 fp16 MMAs with f32 accumulators,
// the product matmul-batch-half.cu's streamed form computes, with the same lane mapping
// (HalfRows<T>). There every lane loads its own weight blocks into registers a few steps ahead,
// so bytes in flight cost registers and each warp's loads sit in its own instruction stream.
// Here the copy engine (TMA) brings each stage of 256 columns into shared memory: the row
// tile's weight rows and scales (2-D tensor maps: a step's 128 rows are not contiguous) and the
// tokens' x (a 3-D map whose 128-byte swizzle lets a quarter-warp read eight distinct bank
// groups). One thread of a fifth warp keeps a ring of two stages full; four warps only
// dequantize and multiply. K splits meet through a cluster's shared memory (store_tile_sums),
// as in the streamed form. 33-64 tokens run as two groups of 32 (each block re-reads its W
// tile, mostly from L2), where the row tiles fill the SMs (matmul_batch_tma_takes()).
// Measured (H100, hearth-cuda-bench --batch-only, us, Q4_0 / Q4_K at 32 tokens, against the
// streamed form): 4096x4096 11.2 / 12.3 against 11.4 / 14.9, 11008x4096 17.3 / 19.6 against
// 18.2 / 20.7, 4096x11008 21.0 / 24.9 against 22.7 / 31.5. What bounds it (ncu, 11008x4096):
// the MMA warps' issue rate (0.31 instructions a cycle a scheduler, ~770 instructions a warp a
// stage, 450 of them dequantization); the copies alone take ~13 us. Tried and slower: Q8_0 (its
// rows are twice the bytes for the same work: 28.5 against 23.6), 256-row tiles (eight MMA
// warps: half of x's reads, but two blocks an SM), one block an SM with a deeper ring, and
// warpgroup MMAs (wgmma, A from registers, x straight from the swizzled box): 17.6 against
// 17.3, as session 42 found for the streamed form; and wgmma with W dequantized into shared
// memory, 64 tokens a block (35.2 / 55.8 at 32 / 64 tokens: the unpacking is still most of a
// stage's instructions, and the shared-memory A buffers leave one or two blocks an SM;
// session 62).
// The gated form (launch_matmul_batch_tma_gated) is the same loop over W_gate and W_up at once:
// a block's 128 rows are 64 of each (two boxes a stage), a warp's two row tiles the same rows of
// both, and the epilogue writes act(gate) * up and its fp16 form, not the two products.
// New dtype: one TmaRows<> specialization (its step's bytes in a stage, its scales' box).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "kernels/cuda/bulk-copy.cuh"
#include "kernels/cuda/decode-batch.h"
#include "kernels/cuda/driver-entry.h"
#include "kernels/cuda/gate-act.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/matmul-half-rows.cuh"
#include "kernels/cuda/matmul-tma-store.cuh"

namespace hearth::cuda {

namespace {

using namespace tma_form;  // (the block's shape and epilogues: matmul-tma-store.cuh)

// A dtype's step in a stage: kBodyStep bytes a row (the body's box width), swizzled in 16-byte
// chunks by row when a row is a whole 128-byte line (Q4_0's 64-byte rows are conflict-free as
// they are: a quarter-warp's two rows are 128 contiguous bytes); the scales' box: 16 bytes a
// row a stage (Q4_0: eight fp16 d; Q4_K: the super-block's head).
template <DType T>
struct TmaRows;

template <>
struct TmaRows<DType::Q4_0> {
  static constexpr int kStepCols = 128, kBodyStep = 64, kAuxStage = 8;  // (aux: fp16 d)
  static constexpr bool kSwizzled = false;
  static __device__ void load(HalfRows<DType::Q4_0>::Row& r, const uint8_t* body,
                              const uint8_t* aux, int row, int step, int t) {
    r.q = *reinterpret_cast<const uint4*>(body + row * 64 + t * 16);
    r.d = *reinterpret_cast<const uint16_t*>(aux + row * 16 + (step * 4 + t) * 2);
  }
};

// 128-byte line `row` of a swizzled box: its 16-byte chunk c.
__device__ __forceinline__ uint4 swizzled_chunk(const uint8_t* box, int row, int c) {
  return *reinterpret_cast<const uint4*>(box + row * kLine + ((c ^ (row & 7)) << 4));
}

template <>
struct TmaRows<DType::Q4_K> {
  static constexpr int kStepCols = 256, kBodyStep = 128, kAuxStage = 16;  // (aux: bytes)
  static constexpr bool kSwizzled = true;
  static __device__ void load(HalfRows<DType::Q4_K>::Row& r, const uint8_t* body,
                              const uint8_t* aux, int row, int, int t) {
    r.q0 = swizzled_chunk(body, row, 2 * t);
    r.q1 = swizzled_chunk(body, row, 2 * t + 1);
    r.head = *reinterpret_cast<const uint4*>(aux + row * 16);
  }
};

// Up to three matrices of one x (Q/K/V, gate/up) in one launch: row tiles of kRows. The tensor
// maps live in the kernel's parameters (__grid_constant__), where the copy engine reads them.
struct TmaPlan {
  CUtensorMap body[3], aux[3], x;
  float* y[3] = {nullptr, nullptr, nullptr};
  float* add[3] = {nullptr, nullptr, nullptr};
  int64_t rows[3] = {0, 0, 0};
  unsigned tile_end[3] = {0, 0, 0};
  int splits = 1;        // gridDim.z: K ranges, the blocks of one cluster
  int split_stages = 0;  // stages of K per split (the last split may have fewer)
  int stages = 0;        // cols / kStageCols
  // The gated form (launch_matmul_batch_tma_gated): body / aux [0] W_gate's, [1] W_up's maps of
  // kPairRows rows, rows[0] n_ff; the epilogue writes act(gate) * up to act_out and its fp16 form
  // for the down projection to act_xh (launch_batch_x_half's order).
  float* act_out = nullptr;
  __half* act_xh = nullptr;
  FoldedNorm norm;  // (decode-batch.h)
};

// A block's stage: the row tile's body for two steps of 128 columns (Q4_0) or one of 256 (Q4_K),
// the tokens' x for them, and the scales.
template <DType T>
struct TmaShape {
  using R = TmaRows<T>;
  static constexpr int kSteps = kStageCols / R::kStepCols;   // steps a stage
  static constexpr int kPieces = R::kStepCols / 64;          // x's 128-byte lines a token a step
  static constexpr int kBodyBytes = kRows * R::kBodyStep;    // a step's
  static constexpr int kXBytes = kTokens * kPieces * kLine;  // a step's
  static constexpr int kAuxOffset = kSteps * (kBodyBytes + kXBytes);
  static constexpr int kStageBytes = kAuxOffset + kRows * 16;
  static_assert(kBodyBytes % 1024 == 0 && kXBytes % 1024 == 0 && kStageBytes % 1024 == 0,
                "swizzled boxes start on 1024-byte boundaries");
  static constexpr uint32_t kStageTx = uint32_t(kStageBytes);
  static constexpr int kRing = kStages * kStageBytes;
  static constexpr int kSmem = std::max(kRing, tile_sums_bytes(kRows, kTokens)) +
                               1024;  // (the ring's start rounded up to 1024)
};

__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3}], [%4];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1,
                                            int c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3, %4}], [%5];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

// grid (row tiles, token groups of 32, K splits), clusters of (1, 1, splits) when split.
// Warps 0-3: rows warp*32.. of the tile, every token of the group; warp 4: the copies.
// Gate (not NoGate): the gated form, warp w's row tiles rows w*16.. of W_gate's and W_up's 64.
template <DType T, class Gate>
__global__ void __launch_bounds__(kThreads, 3)
    matmul_tma_kernel(const __grid_constant__ TmaPlan plan, int n_tok) {
  using H = HalfRows<T>;
  using R = TmaRows<T>;
  using Sh = TmaShape<T>;
  constexpr int S = kStages, NT = kNT;
  constexpr bool kGated = !std::is_same_v<Gate, NoGate>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  __shared__ float tok_scale[kTokens];  // (a folded norm's: each token's factor on the sums)
  pdl_trigger();
  // (an offset from smem_raw, not a rounded integer address: the compiler then still knows the
  // ring is shared memory and reads it with LDS, not generic loads)
  uint8_t* ring = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int j = blockIdx.x < plan.tile_end[0] ? 0 : blockIdx.x < plan.tile_end[1] ? 1 : 2;
  const int64_t d = plan.rows[j];
  const int tile = int(blockIdx.x - (j == 0 ? 0u : plan.tile_end[j - 1]));
  const int tile_row0 = tile * (kGated ? kPairRows : kRows), tok0 = int(blockIdx.y) * kTokens;
  const int s0 = int(blockIdx.z) * plan.split_stages;  // first stage of this split
  const int n = min(plan.split_stages, plan.stages - s0);
  if (tid == 0) {
    for (int i = 0; i < S; ++i) barrier_init(&full[i], 1), barrier_init(&empty[i], kMmaWarps);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  float acc[kMT][NT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
  const bool live = tile_row0 + warp * (kGated ? 16 : kWarpRows) < d;

  if (warp == kMmaWarps) {
    const CUtensorMap* body = &plan.body[j];
    const CUtensorMap* aux = &plan.aux[j];
    // The weights are constant: the first stages' copies start before x's producer is done.
    auto copy_w = [&](int k) {
      uint8_t* st = ring + (k % S) * Sh::kStageBytes;
      const int stage = s0 + k;
      bulk_expect_bytes(&full[k % S], Sh::kStageTx);
      // (the gated form: W_up's rows under W_gate's, both maps' boxes kPairRows rows)
      constexpr int kMaps = kGated ? 2 : 1;
#pragma unroll
      for (int m = 0; m < kMaps; ++m) {
#pragma unroll
        for (int s = 0; s < Sh::kSteps; ++s)
          tma_load_2d(st + s * Sh::kBodyBytes + m * kPairRows * R::kBodyStep, body + m,
                      (stage * Sh::kSteps + s) * R::kBodyStep, tile_row0, &full[k % S]);
        tma_load_2d(st + Sh::kAuxOffset + m * kPairRows * 16, aux + m, stage * R::kAuxStage,
                    tile_row0, &full[k % S]);
      }
    };
    auto copy_x = [&](int k) {
      uint8_t* st = ring + (k % S) * Sh::kStageBytes + Sh::kSteps * Sh::kBodyBytes;
      const int stage = s0 + k;
#pragma unroll
      for (int s = 0; s < Sh::kSteps; ++s)
        tma_load_3d(st + s * Sh::kXBytes, &plan.x, 0, (stage * Sh::kSteps + s) * Sh::kPieces, tok0,
                    &full[k % S]);
    };
    const int pre = min(n, S);
    if (lane == 0)
      for (int k = 0; k < pre; ++k) copy_w(k);
    pdl_wait();  // (and the split epilogue has every thread write y)
    if (lane == 0)
      for (int k = 0; k < pre; ++k) copy_x(k);
    // x carries a folded norm: its rows' scales while the first stages' copies fly.
    if (plan.norm.ss_in) {
      const int tok = tok0 + lane;
      float f = 0.f;
      if (tok < n_tok) {
        const float* ss = plan.norm.ss_in + int64_t(tok) * plan.norm.ss_tiles;
        float sum = 0.f;
        for (int i = 0; i < plan.norm.ss_tiles; ++i) sum += ss[i];
        const float r = rsqrtf(sum / float(plan.norm.n) + plan.norm.eps);
        f = r / plan.norm.s_in[tok];
        if (blockIdx.x == 0 && blockIdx.z == 0) plan.norm.r_out[tok] = r;
      }
      tok_scale[lane] = f;
    }
    if (lane == 0)
      for (int k = S; k < n; ++k) {
        bulk_wait(&empty[k % S], uint32_t((k / S - 1) & 1));
        copy_w(k);
        copy_x(k);
      }
  } else {
    pdl_wait();  // (the epilogue writes y and adds to the residual earlier kernels wrote)
    for (int k = 0; k < n; ++k) {
      const uint8_t* st = ring + (k % S) * Sh::kStageBytes;
      bulk_wait(&full[k % S], uint32_t((k / S) & 1));
      if (live) {
#pragma unroll
        for (int s = 0; s < Sh::kSteps; ++s) {
          const uint8_t* body = st + s * Sh::kBodyBytes;
          const uint8_t* xs = st + Sh::kSteps * Sh::kBodyBytes + s * Sh::kXBytes;
          typename H::Row wr[kMT][2];
          typename H::Ready kr[kMT][2];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              // (gated: tile 0 of a warp's two is W_gate's rows, tile 1 W_up's same rows)
              const int row = kGated ? mt * kPairRows + warp * 16 + h * 8 + g
                                     : warp * kWarpRows + mt * 16 + h * 8 + g;
              R::load(wr[mt][h], body, st + Sh::kAuxOffset, row, s, t);
              kr[mt][h] = H::prep(wr[mt][h], t);
            }
#pragma unroll
          for (int c = 0; c < H::kLaneBlocks; ++c)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              uint32_t a[kMT][2][4];
#pragma unroll
              for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  H::frag(wr[mt][0], kr[mt][0], c, q, e, a[mt][e][0], a[mt][e][2]);
                  H::frag(wr[mt][1], kr[mt][1], c, q, e, a[mt][e][1], a[mt][e][3]);
                }
              // Lane t's block of the step, granule q: line (token, piece) of the swizzled box.
              const int b = t * H::kLaneBlocks + c, chunk = (b & 1) * 4 + q;
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) {
                const uint4 xb = swizzled_chunk(xs, (nt * 8 + g) * Sh::kPieces + (b >> 1), chunk);
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt) {
                  const uint32_t(&a0)[4] = a[mt][0];
                  const uint32_t(&a1)[4] = a[mt][1];
                  mma_f16(a0[0], a0[1], a0[2], a0[3], xb.x, xb.y, acc[mt][nt]);
                  mma_f16(a1[0], a1[1], a1[2], a1[3], xb.z, xb.w, acc[mt][nt]);
                }
              }
            }
        }
      }
      __syncwarp();
      if (lane == 0) barrier_arrive(&empty[k % S]);
    }
  }
  if (plan.norm.ss_in) {  // (tok_scale written by the copy warp)
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float f = tok_scale[nt * 8 + 2 * t + (i & 1)];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) acc[mt][nt][i] *= f;
      }
  }
  if (plan.splits > 1 || plan.norm.next_xh) __syncthreads();  // the ring takes the partial sums
  if (plan.norm.next_xh) {
    store_norm_sums(acc, warp < kMmaWarps ? warp * kWarpRows : -1, tile, tile_row0, tok0, d, n_tok,
                    plan.y[0], plan.add[0], plan.norm, plan.splits, reinterpret_cast<float*>(ring));
    return;
  }
  if constexpr (kGated) {
    store_gated<Gate>(acc, live && warp < kMmaWarps, warp < kMmaWarps ? warp : -1, tile_row0, tok0,
                      d, n_tok, plan.act_out, plan.act_xh, plan.splits,
                      reinterpret_cast<float*>(ring));
    return;
  }
  store_tile_sums<kMT, NT, kRows, kTokens, kThreads>(acc, live && warp < kMmaWarps,
                                                     warp < kMmaWarps ? warp * kWarpRows : -1,
                                                     tile_row0, tok0, d, n_tok,
                                                     j == 0   ? plan.y[0]
                                                     : j == 1 ? plan.y[1]
                                                              : plan.y[2],
                                                     j == 0   ? plan.add[0]
                                                     : j == 1 ? plan.add[1]
                                                              : plan.add[2],
                                                     plan.splits, reinterpret_cast<float*>(ring));
}

// cuTensorMapEncodeTiled, through the runtime (driver_entry_point): null where the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    PFN_cuTensorMapEncodeTiled_v12000 f = nullptr;
    return driver_entry_point("cuTensorMapEncodeTiled", 12000, &f) ? f : nullptr;
  }();
  return fn;
}

// A tiled map of `rank` dims (dims[0] innermost; strides: bytes of dims 1..rank-1), box `box`.
bool encode_map(CUtensorMap* m, CUtensorMapDataType type, uint32_t rank, const void* base,
                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                bool swizzled) {
  const PFN_cuTensorMapEncodeTiled_v12000 f = encode_fn();
  const cuuint32_t unit[3] = {1, 1, 1};
  return f &&
         f(m, type, rank, const_cast<void*>(base), dims, strides, box, unit,
           CU_TENSOR_MAP_INTERLEAVE_NONE,
           swizzled ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A weight's two maps: its body's rows (a step's bytes by box_rows rows) and its scales' (16
// bytes by box_rows rows). Rows past the end of W come as zeros (scale 0: products of 0).
template <DType T>
bool encode_weight(const DeviceWeight& w, CUtensorMap* body, CUtensorMap* aux, int box_rows) {
  using R = TmaRows<T>;
  const uint64_t bpr = uint64_t(w.blocks_per_row), rows = uint64_t(w.rows);
  const uint64_t row_bytes = bpr * (T == DType::Q4_0 ? 16 : 128);
  const cuuint64_t body_dims[2] = {row_bytes, rows}, body_stride[1] = {row_bytes};
  const cuuint32_t body_box[2] = {uint32_t(R::kBodyStep), uint32_t(box_rows)};
  if (!encode_map(body, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w.body, body_dims, body_stride, body_box,
                  R::kSwizzled))
    return false;
  const cuuint32_t aux_box[2] = {uint32_t(R::kAuxStage), uint32_t(box_rows)};
  if (T == DType::Q4_K) {
    const cuuint64_t dims[2] = {bpr * 16, rows}, stride[1] = {bpr * 16};
    return encode_map(aux, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w.aux_head, dims, stride, aux_box,
                      false);
  }
  const cuuint64_t dims[2] = {bpr, rows}, stride[1] = {bpr * 2};
  return encode_map(aux, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, w.aux16, dims, stride, aux_box, false);
}

// Encoded once per weight and box (a decode step would otherwise encode hundreds of maps on the
// host): keyed by the body's address, re-encoded when what is there has another shape or scales.
struct WeightMaps {
  const void* aux = nullptr;
  int64_t rows = 0, cols = 0;
  DType dtype = DType::F32;
  CUtensorMap body, scales;
};
bool weight_maps(const DeviceWeight& w, CUtensorMap* body, CUtensorMap* aux, int box_rows = kRows) {
  static std::mutex mu;
  static std::unordered_map<const void*, WeightMaps> caches[2];  // kRows, kPairRows
  std::unordered_map<const void*, WeightMaps>& cache = caches[box_rows == kRows ? 0 : 1];
  const void* aux_ptr = w.dtype == DType::Q4_K ? static_cast<const void*>(w.aux_head) : w.aux16;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(w.body);
  if (it == cache.end() || it->second.aux != aux_ptr || it->second.rows != w.rows ||
      it->second.cols != w.cols || it->second.dtype != w.dtype) {
    WeightMaps m;
    m.aux = aux_ptr, m.rows = w.rows, m.cols = w.cols, m.dtype = w.dtype;
    const bool ok =
        w.dtype == DType::Q4_0   ? encode_weight<DType::Q4_0>(w, &m.body, &m.scales, box_rows)
        : w.dtype == DType::Q4_K ? encode_weight<DType::Q4_K>(w, &m.body, &m.scales, box_rows)
                                 : false;
    if (!ok) return false;
    if (cache.size() >= 4096) cache.clear();  // (weights of models long unloaded)
    it = cache.insert_or_assign(w.body, m).first;
  }
  *body = it->second.body;
  *aux = it->second.scales;
  return true;
}

// x [n_tok, cols] fp16 as 128-byte lines: dims (64 halves, cols / 64, n_tok), a box of `pieces`
// lines by `tokens` tokens (tokens past n_tok come as zeros).
bool encode_x(CUtensorMap* m, const void* xh, int64_t n_tok, int64_t cols, int pieces, int tokens) {
  const cuuint64_t dims[3] = {64, uint64_t(cols / 64), uint64_t(n_tok)};
  const cuuint64_t strides[2] = {uint64_t(kLine), uint64_t(cols) * 2};
  const cuuint32_t box[3] = {64, uint32_t(pieces), uint32_t(tokens)};
  return encode_map(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, xh, dims, strides, box, true);
}

struct TmaKernel {
  void (*fn)(TmaPlan, int) = nullptr;
  int pieces = 0, smem = 0;
  SplitFit fit;  // (asked of the device)
};

template <DType T, class Gate = NoGate>
TmaKernel tma_kernel() {
  using Sh = TmaShape<T>;
  return {matmul_tma_kernel<T, Gate>, Sh::kPieces, Sh::kSmem,
          split_fit(matmul_tma_kernel<T, Gate>, kThreads, Sh::kSmem)};
}

// Each dtype's kernel, asked of the device once.
const TmaKernel& pick(DType t) {
  static const TmaKernel q4_0 = tma_kernel<DType::Q4_0>(), q4_k = tma_kernel<DType::Q4_K>();
  return t == DType::Q4_0 ? q4_0 : q4_k;
}
const TmaKernel& pick_gated(DType t, GatedForm act) {
  static const TmaKernel k[2][2] = {
      {tma_kernel<DType::Q4_0, SiluGate>(), tma_kernel<DType::Q4_0, GeluTanhGate>()},
      {tma_kernel<DType::Q4_K, SiluGate>(), tma_kernel<DType::Q4_K, GeluTanhGate>()}};
  return k[t == DType::Q4_0 ? 0 : 1][act == GatedForm::kSilu ? 0 : 1];
}

bool hopper() {
  static const bool yes = [] {
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           major >= 9;
  }();
  return yes;
}

// K splits: the count whose waves of blocks, each with its share of the stages plus a fixed
// cost of about two stages (the ring's fill, the epilogue), take the least time.
void plan_splits(TmaPlan& p, int64_t tiles, const TmaKernel& k) {
  const int64_t slots = int64_t(k.fit.blocks_per_sm) * device_sm_count();
  const int max_splits = k.fit.clusters ? std::min(kMaxTileSplits, p.stages) : 1;
  int64_t best_cost = -1;
  for (int s = 1; s <= max_splits; ++s) {
    const int per = (p.stages + s - 1) / s;
    if ((p.stages + per - 1) / per != s) continue;  // (the same split as fewer)
    const int64_t cost = (tiles * s + slots - 1) / slots * (per + 2);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, p.splits = s, p.split_stages = per;
  }
}

// The weights (one dtype and cols) the copy-engine form takes at n_tokens.
bool tma_takes(const DeviceWeight* const* ws, int n, int64_t n_tokens, int64_t cols,
               bool any_tiles = false) {
  if (n < 1 || n > 3 || n_tokens < kMatmulBatchHalfMinTokens || n_tokens > 64 ||
      cols % kStageCols != 0 || cols > (int64_t(1) << 30) || !encode_fn())
    return false;
  int64_t tiles = 0;
  for (int i = 0; i < n; ++i) {
    const DeviceWeight& w = *ws[i];
    if (w.cols != cols || w.dtype != ws[0]->dtype || w.rows <= 0 || w.rows > (1 << 30) ||
        !matmul_batch_supports(w) || (w.dtype != DType::Q4_0 && w.dtype != DType::Q4_K))
      return false;
    tiles += (w.rows + kRows - 1) / kRows;
  }
  // 33-64 tokens run as two token groups, each reading W (the second mostly from L2): a win
  // where the row tiles of both fill the SMs (H100, us, Q4_0 / Q4_K at 64 tokens: 11008x4096
  // 26.1 / 30.4 against the streamed form's 30.5 / 35.8), a loss over 4096 rows (4096x4096
  // 17.6 / 20.2 against 15.5 / 17.7, 4096x11008 34.7 / 42.3 against 29.8 / 35.9).
  if (n_tokens > 32 && tiles * 2 < device_sm_count() && !any_tiles) return false;
  return hopper();
}

}  // namespace

bool matmul_batch_tma_norm_takes(const GemvJob& job, int64_t n_tokens) {
  // (at 33-64 tokens whatever its row tiles: there the norm's launch costs more than the
  // few-tile form gives up; the backend takes the staged form instead where that is the plain
  // product's and has K splits, matmul_batch_staged_norm_takes)
  const DeviceWeight* w = &job.w;
  return job.y && job.add_to && job.w.rows % 4 == 0 &&
         tma_takes(&w, 1, n_tokens, job.w.cols, /*any_tiles=*/true);
}

bool matmul_batch_tma_takes(const GemvJob* jobs, int n_jobs, int64_t n_tokens, int64_t cols) {
  if (n_jobs < 1 || n_jobs > 3) return false;
  const DeviceWeight* ws[3];
  for (int i = 0; i < n_jobs; ++i) {
    if (!jobs[i].y) return false;
    ws[i] = &jobs[i].w;
  }
  return tma_takes(ws, n_jobs, n_tokens, cols);
}

bool matmul_batch_tma_gated_takes(const DeviceWeight& gate, const DeviceWeight& up,
                                  int64_t n_tokens) {
  // (the same work as the plain form's two jobs, so the same choice at 33-64 tokens)
  const DeviceWeight* ws[2] = {&gate, &up};
  return gate.rows == up.rows && gate.rows % 4 == 0 && tma_takes(ws, 2, n_tokens, gate.cols);
}

cudaError_t launch_matmul_batch_tma_gated(const DeviceWeight& gate, const DeviceWeight& up,
                                          GatedForm act, const void* xh, int64_t n_tokens,
                                          float* out, void* out_xh, cudaStream_t s,
                                          const FoldedNorm* norm) {
  if (norm && (norm->next_xh || !norm->ss_in || !norm->s_in || !norm->r_out ||
               norm->ss_tiles <= 0 || norm->n <= 0))
    return cudaErrorInvalidValue;
  if (!xh || reinterpret_cast<uintptr_t>(xh) % 16 != 0 || !out || !out_xh ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0 || reinterpret_cast<uintptr_t>(out_xh) % 8 != 0 ||
      !matmul_batch_tma_gated_takes(gate, up, n_tokens))
    return cudaErrorInvalidValue;
  const TmaKernel& k = pick_gated(gate.dtype, act);
  if (!k.fn || k.fit.blocks_per_sm == 0) return cudaErrorInvalidValue;
  TmaPlan p;
  if (!weight_maps(gate, &p.body[0], &p.aux[0], kPairRows) ||
      !weight_maps(up, &p.body[1], &p.aux[1], kPairRows))
    return cudaErrorInvalidValue;
  p.rows[0] = gate.rows;
  const unsigned tiles = unsigned((gate.rows + kPairRows - 1) / kPairRows);
  p.tile_end[0] = p.tile_end[1] = p.tile_end[2] = tiles;
  p.act_out = out;
  p.act_xh = static_cast<__half*>(out_xh);
  if (norm) p.norm = *norm;
  if (!encode_x(&p.x, xh, n_tokens, gate.cols, k.pieces, kTokens)) return cudaErrorInvalidValue;
  p.stages = int(gate.cols / kStageCols);
  const int64_t groups = (n_tokens + kTokens - 1) / kTokens;
  plan_splits(p, int64_t(tiles) * groups, k);
  const dim3 grid(tiles, unsigned(groups), unsigned(p.splits));
  return launch_pdl_clusters(k.fn, grid, dim3(kThreads), size_t(k.smem), s, grid.z, p,
                             int(n_tokens));
}

cudaError_t launch_matmul_batch_half_tma(const GemvJob* jobs, int n_jobs, const void* xh,
                                         int64_t n_tokens, int64_t cols, cudaStream_t s,
                                         const FoldedNorm* norm) {
  const bool first = norm && norm->next_xh, next = norm && norm->ss_in;
  if (!xh || reinterpret_cast<uintptr_t>(xh) % 16 != 0 || (first && next) ||
      (first ? n_jobs != 1 || !matmul_batch_tma_norm_takes(jobs[0], n_tokens) || !norm->w ||
                   !norm->s || !norm->ss || reinterpret_cast<uintptr_t>(norm->next_xh) % 8 != 0 ||
                   reinterpret_cast<uintptr_t>(norm->w) % 16 != 0
             : !matmul_batch_tma_takes(jobs, n_jobs, n_tokens, cols)) ||
      (next && (!norm->s_in || !norm->r_out || norm->ss_tiles <= 0 || norm->n <= 0)))
    return cudaErrorInvalidValue;
  const TmaKernel& k = pick(jobs[0].w.dtype);
  if (!k.fn || k.fit.blocks_per_sm == 0) return cudaErrorInvalidValue;
  TmaPlan p;
  unsigned end = 0;
  for (int i = 0; i < 3; ++i) {
    if (i < n_jobs) {
      if (!weight_maps(jobs[i].w, &p.body[i], &p.aux[i])) return cudaErrorInvalidValue;
      p.y[i] = jobs[i].y;
      p.add[i] = jobs[i].add_to;
      p.rows[i] = jobs[i].w.rows;
      end += unsigned((jobs[i].w.rows + kRows - 1) / kRows);
    }
    p.tile_end[i] = end;
  }
  if (!encode_x(&p.x, xh, n_tokens, cols, k.pieces, kTokens)) return cudaErrorInvalidValue;
  if (norm) p.norm = *norm;
  p.stages = int(cols / kStageCols);
  const int64_t groups = (n_tokens + kTokens - 1) / kTokens;
  plan_splits(p, int64_t(end) * groups, k);
  const dim3 grid(end, unsigned(groups), unsigned(p.splits));
  return launch_pdl_clusters(k.fn, grid, dim3(kThreads), size_t(k.smem), s, grid.z, p,
                             int(n_tokens));
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
