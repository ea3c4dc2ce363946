// Prefill attention on the tensor cores (mma.sync m16n8k16, fp16 in, fp32 accumulate, fp32
// online softmax): causal, GQA, head_dim 64 or 128, K/V rows of any cache type (kv-rows.cuh),
// gpt-oss's sinks in the final normalisation. Other shapes keep attention.cu's fp32 kernel.
// To add a head_dim: instantiate attn_tc_kernel<HD> in launch_attention_prefill_tc (HD % 16 == 0).
#include <cuda_fp16.h>

#include "kernels/cuda/attention-softmax.cuh"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/kv-rows.cuh"

namespace hearth::cuda {

namespace {

constexpr int kBQ = 64;  // queries per block: 4 warps x 16 rows (one mma row tile each)
constexpr int kBK = 64;  // keys per shared-memory tile
constexpr int kWarps = 4;
constexpr int kKPad = 8;  // halves of padding per K / V row: conflict-free ldmatrix rows
// K/V load iterations per thread in flight while a tile fills. H200, 7B layer at 512 tokens
// (cuda-bench): 1 66.3 us, 4 43.6, 8 40.8; in the F16 prefill pass 2,788 / 1,702 / 1,533 us.
constexpr int kLoads = 8;

// Each fp16 operand is x = hi + lo, two fp16 values that keep ~22 bits: S = Qhi.Khi + Qlo.Khi +
// Qhi.Klo and O = Phi.Vhi + Plo.Vhi + Phi.Vlo: the dropped lo.lo terms are ~2^-22 of the result, so
// the output is close to the fp32 kernel's (one fp16 rounding of q, k, p and v would put ~1e-3
// relative error into the scores of a 7B-sized model). Values must stay inside fp16's range
// (|x| < 65504), as attention inputs of Llama-family models do.
// d += a (16x16, row) * b (16x8, col); fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Which (query tile, head) a block computes. Causal work grows with the query tile, so items
// go heaviest first (all heads' last tiles, then the ones before). first_wave > 0 (the SM count,
// when every block fits on the GPU at once): blocks first_wave.. take the items from the
// lightest up, so the SM that gets block j (the j-th heaviest) also gets the j-th lightest and
// per-SM work evens out (the 7B pass: the busiest SM had 12 key tiles to do against a mean of
// 9).
struct BlockItem {
  int64_t q_tile;
  int head;
};
__device__ __forceinline__ BlockItem block_item(int64_t b, int64_t n_blocks, int n_heads,
                                                int first_wave) {
  const int64_t n_tiles = n_blocks / n_heads;
  const int64_t i = first_wave > 0 && b >= first_wave ? n_blocks - 1 - (b - first_wave) : b;
  return {n_tiles - 1 - i / n_heads, int(i % n_heads)};
}

// Block = (64 queries, head h); warp w owns queries q0 + 16w .. + 15. Thread (g = lane / 4,
// c = lane % 4) holds rows g and g + 8 of its warp's tiles (the mma fragment layout).
// Shared memory per key tile: K and V as [key][dim] hi and lo halves; B fragments come out of
// ldmatrix (V's transposed).
// q, out: [T, n_heads, HD] f32; kc, vc: [ctx, n_kv_heads, HD] rows of form F, rows 0 .. pos0 +
// T - 1 valid. F16 rows are exact in one half: their lo halves are zero, and the products with
// them are skipped.
template <int HD, KvForm F>
__global__ void __launch_bounds__(kWarps * 32, 2)
    attn_tc_kernel(const float* __restrict__ q, const uint8_t* __restrict__ kc,
                   const uint8_t* __restrict__ vc, float* __restrict__ out, int64_t n_tokens,
                   int64_t pos0, int n_heads, int n_kv_heads, float scale, int first_wave,
                   AttnKv kvt) {
  constexpr bool kExactKv = F == KvForm::kF16;
  constexpr int kKS = HD + kKPad;  // K / V row stride (halves)
  constexpr int kKC = HD / 16;     // 16-dim chunks (QK^T k-steps)
  constexpr int kND = HD / 8;      // 8-dim output tiles
  constexpr int kNT = kBK / 8;     // 8-key score tiles
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* ks = reinterpret_cast<__half*>(smem_raw);  // [2: hi, lo][kBK][kKS]
  __half* vs = ks + 2 * kBK * kKS;                   // [2: hi, lo][kBK][kKS]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const BlockItem item = block_item(blockIdx.x, gridDim.x, n_heads, first_wave);
  const int h = item.head;
  const int kvh = h / (n_heads / n_kv_heads);
  const int64_t q0 = item.q_tile * kBQ;
  const int64_t kv_stride = int64_t(n_kv_heads) * HD;
  const int64_t q_last = (q0 + kBQ < n_tokens ? q0 + kBQ : n_tokens) - 1;
  const int64_t kv_end = pos0 + q_last + 1;  // keys this block reads
  const int64_t wrow0 = q0 + warp * 16;      // first query row of this warp
  const int64_t w_last_pos = pos0 + wrow0 + 15;

  // Q fragments (scaled, split), straight from global memory into registers.
  uint32_t qh[kKC][4], ql[kKC][4];
#pragma unroll
  for (int kc = 0; kc < kKC; ++kc) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t t = wrow0 + g + ((r & 1) ? 8 : 0);
      const int d = kc * 16 + 2 * c + ((r & 2) ? 8 : 0);
      float2 v = make_float2(0.f, 0.f);
      if (t < n_tokens) v = *reinterpret_cast<const float2*>(q + (t * n_heads + h) * HD + d);
      v.x *= scale, v.y *= scale;
      split_half2(v.x, v.y, qh[kc][r], ql[kc][r]);
    }
  }

  float o[kND][4];
#pragma unroll
  for (int nd = 0; nd < kND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // rows g and g + 8
  const int64_t pos_r0 = pos0 + wrow0 + g, pos_r1 = pos_r0 + 8;

  for (int64_t kt0 = 0; kt0 < kv_end; kt0 += kBK) {
    __syncthreads();  // the previous tile has been consumed
    // K and V rows: coalesced float4 loads, 8-byte shared stores of hi and lo. kLoads
    // iterations' loads go out before the first is converted (the loop was latency-bound: one
    // K and one V load in flight per thread, ncu's top stall).
    constexpr int kD4 = HD / 4;
    constexpr int kIters = kBK * kD4 / (kWarps * 32);
    static_assert(kIters % kLoads == 0, "load batches must tile the K/V tile");
#pragma unroll 1
    for (int it0 = 0; it0 < kIters; it0 += kLoads) {
      if constexpr (kExactKv) {
        // f16 rows are already the hi halves: 8-byte raw copies, nothing to convert or split.
        uint2 kh[kLoads], vh[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int idx = (it0 + u) * kWarps * 32 + threadIdx.x;
          const int64_t p = kt0 + idx / kD4;
          const int64_t e = p * kv_stride + kvh * HD + (idx % kD4) * 4;
          kh[u] = vh[u] = make_uint2(0u, 0u);
          if (p < kv_end) {
            kh[u] = reinterpret_cast<const uint2*>(kc)[e >> 2];
            vh[u] = reinterpret_cast<const uint2*>(vc)[e >> 2];
          }
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int idx = (it0 + u) * kWarps * 32 + threadIdx.x;
          const int key = idx / kD4, d = (idx % kD4) * 4;
          *reinterpret_cast<uint2*>(ks + key * kKS + d) = kh[u];
          *reinterpret_cast<uint2*>(vs + key * kKS + d) = vh[u];
        }
      } else {
        float4 kv[kLoads], vv[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int idx = (it0 + u) * kWarps * 32 + threadIdx.x;
          const int64_t p = kt0 + idx / kD4;
          const int d = (idx % kD4) * 4;
          kv[u] = vv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
          if (p < kv_end) {
            kv[u] = kv_load4<F>(kc, p * kv_stride + kvh * HD + d, kvt.k);
            vv[u] = kv_load4<F>(vc, p * kv_stride + kvh * HD + d, kvt.v);
          }
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int idx = (it0 + u) * kWarps * 32 + threadIdx.x;
          const int key = idx / kD4, d = (idx % kD4) * 4;
          uint2 khi, klo, vhi, vlo;
          split_half2(kv[u].x, kv[u].y, khi.x, klo.x);
          split_half2(kv[u].z, kv[u].w, khi.y, klo.y);
          split_half2(vv[u].x, vv[u].y, vhi.x, vlo.x);
          split_half2(vv[u].z, vv[u].w, vhi.y, vlo.y);
          *reinterpret_cast<uint2*>(ks + kBK * kKS + key * kKS + d) = klo;
          *reinterpret_cast<uint2*>(vs + kBK * kKS + key * kKS + d) = vlo;
          *reinterpret_cast<uint2*>(ks + key * kKS + d) = khi;
          *reinterpret_cast<uint2*>(vs + key * kKS + d) = vhi;
        }
      }
    }
    __syncthreads();
    if (kt0 > w_last_pos) continue;  // every key of this tile is in this warp's future

    // S = Q K^T for 16 rows x 64 keys.
    float s[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    // ldmatrix rows for score tiles nt, nt + 1: lanes 0-15 keys of nt (dims +0 / +8), 16-31 nt + 1.
    const int k_row = (lane >> 4) * 8 + (lane & 7), k_col = ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kc = 0; kc < kKC; ++kc) {
#pragma unroll
      for (int nt = 0; nt < kNT; nt += 2) {
        const __half* kr = ks + (nt * 8 + k_row) * kKS + kc * 16 + k_col;
        uint32_t bh[4];
        ldsm_x4(bh, kr);
        mma16816(s[nt], ql[kc], bh[0], bh[1]);
        mma16816(s[nt + 1], ql[kc], bh[2], bh[3]);
        if constexpr (!kExactKv) {
          uint32_t bl[4];
          ldsm_x4(bl, kr + kBK * kKS);
          mma16816(s[nt], qh[kc], bl[0], bl[1]);
          mma16816(s[nt + 1], qh[kc], bl[2], bl[3]);
        }
        mma16816(s[nt], qh[kc], bh[0], bh[1]);
        mma16816(s[nt + 1], qh[kc], bh[2], bh[3]);
      }
    }
    // Causal mask and the online softmax (rows g, g + 8: 4 lanes share a row).
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int64_t key = kt0 + nt * 8 + 2 * c;
      if (key > pos_r0) s[nt][0] = -INFINITY;
      if (key + 1 > pos_r0) s[nt][1] = -INFINITY;
      if (key > pos_r1) s[nt][2] = -INFINITY;
      if (key + 1 > pos_r1) s[nt][3] = -INFINITY;
      mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float corr0 = exp_diff(m0, mx0), corr1 = exp_diff(m1, mx1);
    m0 = mx0, m1 = mx1;
    l0 *= corr0, l1 *= corr1;
#pragma unroll
    for (int nd = 0; nd < kND; ++nd) {
      o[nd][0] *= corr0, o[nd][1] *= corr0;
      o[nd][2] *= corr1, o[nd][3] *= corr1;
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      s[nt][0] = exp_diff(s[nt][0], mx0);
      s[nt][1] = exp_diff(s[nt][1], mx0);
      s[nt][2] = exp_diff(s[nt][2], mx1);
      s[nt][3] = exp_diff(s[nt][3], mx1);
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
    // O += P V, 16 keys per k-step; P's A fragment is two neighbouring score tiles.
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t ph[4], pl[4];
      split_half2(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
      split_half2(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
      split_half2(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
      split_half2(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
      // ldmatrix.trans rows for output tiles nd, nd + 1: lanes 0-7 / 8-15 keys +0 / +8 at
      // dims of nd, lanes 16-31 the same keys at dims of nd + 1.
      const int v_row = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), v_col = (lane >> 4) * 8;
#pragma unroll
      for (int nd = 0; nd < kND; nd += 2) {
        const __half* vr = vs + v_row * kKS + nd * 8 + v_col;
        uint32_t bh[4];
        ldsm_x4_trans(bh, vr);
        mma16816(o[nd], pl, bh[0], bh[1]);
        mma16816(o[nd + 1], pl, bh[2], bh[3]);
        if constexpr (!kExactKv) {
          uint32_t bl[4];
          ldsm_x4_trans(bl, vr + kBK * kKS);
          mma16816(o[nd], ph, bl[0], bl[1]);
          mma16816(o[nd + 1], ph, bl[2], bl[3]);
        }
        mma16816(o[nd], ph, bh[0], bh[1]);
        mma16816(o[nd + 1], ph, bh[2], bh[3]);
      }
    }
  }
  // Row sums over the 4 lanes of a row, then normalise and write.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = softmax_out_factor(m0, l0, kvt.sinks, h);
  const float inv1 = softmax_out_factor(m1, l1, kvt.sinks, h);
  const int64_t t0 = wrow0 + g, t1 = t0 + 8;
#pragma unroll
  for (int nd = 0; nd < kND; ++nd) {
    const int d = nd * 8 + 2 * c;
    if (t0 < n_tokens)
      *reinterpret_cast<float2*>(out + (t0 * n_heads + h) * HD + d) =
          make_float2(o[nd][0] * inv0, o[nd][1] * inv0);
    if (t1 < n_tokens)
      *reinterpret_cast<float2*>(out + (t1 * n_heads + h) * HD + d) =
          make_float2(o[nd][2] * inv1, o[nd][3] * inv1);
  }
}

template <int HD, KvForm F>
cudaError_t launch_tc(const float* q, const uint8_t* k_cache, const uint8_t* v_cache, float* out,
                      int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                      float scale, cudaStream_t s, const AttnKv& kv) {
  constexpr size_t kSmem = size_t(2) * 2 * size_t(kBK) * (HD + kKPad) * 2;  // K, V: hi and lo
  auto* kernel = attn_tc_kernel<HD, F>;
  if (kSmem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
    if (e != cudaSuccess) return e;
  }
  const int64_t n_blocks = (n_tokens + kBQ - 1) / kBQ * n_heads;
  if (n_blocks > 0x7fffffff) return cudaErrorInvalidValue;
  static const int sms = [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    return cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess ? n : 0;
  }();
  // Per instantiation, once (the kernel variant is fixed for the process).
  static const int per_sm = [&] {
    int n = 0;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarps * 32, kSmem) ==
                   cudaSuccess
               ? n
               : 0;
  }();
  // Pairing (block_item) only helps when every block is resident at once, two to an SM.
  const int first_wave = per_sm == 2 && n_blocks <= int64_t(2) * sms && n_blocks > sms ? sms : 0;
  kernel<<<unsigned(n_blocks), kWarps * 32, kSmem, s>>>(q, k_cache, v_cache, out, n_tokens, pos0,
                                                        int(n_heads), int(n_kv_heads), scale,
                                                        first_wave, kv);
  return cudaGetLastError();
}

}  // namespace

bool attention_prefill_tc_supported(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

cudaError_t launch_attention_prefill_tc(const float* q, const void* k_cache, const void* v_cache,
                                        float* out, int64_t n_tokens, int64_t pos0, int64_t n_heads,
                                        int64_t n_kv_heads, int64_t head_dim, float scale,
                                        cudaStream_t s, const AttnKv& kv) {
  if (n_tokens <= 0) return cudaSuccess;
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || n_heads > 65535 ||
      !attention_prefill_tc_supported(head_dim) || !is_cuda_kv_type(kv.k) || !is_cuda_kv_type(kv.v))
    return cudaErrorInvalidValue;
  const auto* kc = static_cast<const uint8_t*>(k_cache);
  const auto* vc = static_cast<const uint8_t*>(v_cache);
  cudaError_t err = cudaSuccess;
  dispatch_kv_form(kv.k, kv.v, [&](auto form) {
    constexpr KvForm F = decltype(form)::value;
    err =
        head_dim == 64
            ? launch_tc<64, F>(q, kc, vc, out, n_tokens, pos0, n_heads, n_kv_heads, scale, s, kv)
            : launch_tc<128, F>(q, kc, vc, out, n_tokens, pos0, n_heads, n_kv_heads, scale, s, kv);
  });
  return err;
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
