// The MoE gather-GEMVs on int8 activations (moe-ops.h): the decode path for every dtype the dense
// int8 GEMV reads (uses_int8_gemv). The token's x is quantized once (usually by the rmsnorm before
// the block, as for a dense FFN) and each routed expert's rows meet it through the dense GEMV's
// own per-dtype units and dp4a dots (gemv-int8-dot.cuh), with the weight base picked by the
// expert id. gate+up writes h already quantized (the down projection's x), so the layer needs no
// separate quantize launch; down gives each warp one or two output rows of one token and lets its
// lanes split the k experts' units, so the routing-weighted sum has a fixed order (deterministic).
#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/gemv-int8-dot.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe-act.cuh"
#include "kernels/cuda/moe-ops.h"
#include "kernels/cuda/moe-route.cuh"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

namespace {

using namespace int8dot;

constexpr int kWarps = 8;                       // warps per block
constexpr int kWarpRows = 4;                    // gate+up: h rows per warp (two passes of two)
constexpr int kBlockRows = kWarps * kWarpRows;  // = 32: one int8 block of h per CUDA block
static_assert(kBlockRows == 32, "gate_up quantizes one 32-element block of h per CUDA block");

// Units in flight per lane and row: gate+up streams two matrices, so half the dense kernel's
// unroll keeps the same number of loads (and registers) in flight.
template <class Q>
constexpr int kGateUpUnroll = Q::kUnroll > 1 ? Q::kUnroll / 2 : 1;
// down: output rows a warp, each h unit it loads serving that many weight rows (as in the dense
// GEMV), and units in flight per lane and row. Measured on the H200 (hearth-cuda-bench
// --moe-only, one row against two): Mixtral-8x7B's down Q4_K 44.5 -> 24.7 us, Q4_0 38.7 -> 26.9,
// Q8_0 38.4 -> 41.5; qwen3-30b-a3b's Q4_K 7.8 -> 7.5, Q4_0 7.1 -> 7.7, Q8_0 8.9 -> 9.3. Q8_0
// keeps one row.
template <DType T>
constexpr int kDownRows = T == DType::Q8_0 ? 1 : 2;
template <DType T>
constexpr int kDownUnroll = 2 * QT<T>::kUnroll / kDownRows<T>;

// grid (n_ff / 32, S), kWarps warps. Block (bx, s): h rows 32*bx .. 32*bx + 32 of slot s (token
// s / k, expert ids[s]); warp w rows 32*bx + 4w .. + 4, in two passes of two rows, gate and up of
// each row loaded together. The 32 activations meet in shared memory and warp 0 quantizes them
// as block s * (n_ff / 32) + bx of hq [S, n_ff] (and, when h is given, stores them as f32).
// Measured on the H200 (hearth-cuda-bench --moe-only, qwen3-30b-a3b Q4_K, 14 MB routed): this
// form 7.8 us; all four rows in one pass 11.3 us; 16 warps of two rows (one block an SM for want
// of registers) 10.6 us, both with x loaded ahead of the expert id.
template <DType T>
__global__ void __launch_bounds__(kWarps * 32)
    moe_gate_up_int8_kernel(MoeExperts ex, QuantizedActs xa, int32_t* __restrict__ ids, int k,
                            MoeRouter route, float alpha, float limit, int8_t* __restrict__ hq1,
                            int8_t* __restrict__ hq2, float4* __restrict__ hscales,
                            float* __restrict__ h) {
  using Q = QT<T>;
  using Raw = typename Q::Raw;
  constexpr int U = kGateUpUnroll<Q>;
  __shared__ float hs[kBlockRows];
  pdl_trigger();
  pdl_wait();  // ids (or the router's logits) and x come from the kernels before
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t s = blockIdx.y;
  const int e = gate_up_expert(route, ids, k, s);
  const int t = int(s / k);
  const DeviceWeight gw = ex.gate[e], uw = ex.up[e];
  const int64_t nu = ex.n_embd / Q::kUnit;
#pragma unroll 1
  for (int p = 0; p < kWarpRows / 2; ++p) {
    const int64_t r0 = int64_t(blockIdx.x) * kBlockRows + warp * kWarpRows + 2 * p;
    float g[2] = {0.f, 0.f}, u[2] = {0.f, 0.f};
    for (int64_t u0 = lane; u0 < nu; u0 += 32 * U) {
      Raw rg[U][2], ru[U][2];
#pragma unroll
      for (int c = 0; c < U; ++c) {
        const int64_t uu = u0 + 32 * c < nu ? u0 + 32 * c : nu - 1;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          rg[c][r] = Q::load(gw, r0 + r, uu);
          ru[c][r] = Q::load(uw, r0 + r, uu);
        }
      }
#pragma unroll
      for (int c = 0; c < U; ++c) {
        const int64_t uu = u0 + 32 * c;
        if (uu >= nu) break;
        const typename Q::X x = Q::load_x(xa, t, uu);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          g[r] += Q::dot(rg[c][r], x, uu);
          u[r] += Q::dot(ru[c][r], x, uu);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float gs = warp_sum(g[r]), us = warp_sum(u[r]);
      if (lane == 0) {
        if (ex.gate_bias) gs += ex.gate_bias[e][r0 + r], us += ex.up_bias[e][r0 + r];
        hs[r0 + r - int64_t(blockIdx.x) * kBlockRows] = moe_act(gs, us, alpha, limit);
      }
    }
  }
  __syncthreads();
  if (warp != 0) return;
  const float v = hs[lane];
  const int64_t blocks_per_slot = ex.n_ff / 32;
  if (h) h[s * ex.n_ff + int64_t(blockIdx.x) * kBlockRows + lane] = v;
  quant_block32(v, lane, s * blocks_per_slot + blockIdx.x, hq1, hq2, hscales);
}

// grid (n_embd / (kWarps * R), T), kWarps warps, R = kDownRows<T>. Warp w of block (bx, t):
// output rows R*(kWarps*bx + w) .. + R of token t. Its lanes take items i = j * nu + u (expert
// slot j, unit u) in turn, each dot scaled by slot j's routing weight; the lane order and the
// warp sums are fixed, so the result is the same on every run.
template <DType T>
__global__ void __launch_bounds__(kWarps * 32)
    moe_down_int8_kernel(MoeExperts ex, QuantizedActs hq, const int32_t* __restrict__ ids,
                         const float* __restrict__ weights, int k, float* out, bool accumulate) {
  using Q = QT<T>;
  using Raw = typename Q::Raw;
  constexpr int U = kDownUnroll<T>, R = kDownRows<T>;
  __shared__ MoeDownRoute route;
  pdl_trigger();
  pdl_wait();  // ids, weights, h and the residual come from the kernels before
  const int64_t t = blockIdx.y;
  stage_down_route(route, ex, ids, weights, k, t);
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarps + warp) * R;
  const int nu = int(ex.n_ff / Q::kUnit), items = nu * k;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  for (int i0 = lane; i0 < items; i0 += 32 * U) {
    Raw raw[U][R];
#pragma unroll
    for (int c = 0; c < U; ++c) {
      const int i = i0 + 32 * c < items ? i0 + 32 * c : items - 1;
      const int j = i / nu;
#pragma unroll
      for (int r = 0; r < R; ++r) raw[c][r] = Q::load(route.w[j], row0 + r, i - j * nu);
    }
#pragma unroll
    for (int c = 0; c < U; ++c) {
      const int i = i0 + 32 * c;
      if (i >= items) break;
      const int j = i / nu;
      const int uu = i - j * nu;
      const typename Q::X x = Q::load_x(hq, int(t) * k + j, uu);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += route.weight[j] * Q::dot(raw[c][r], x, uu);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = warp_sum(acc[r]);
    if (lane != 0) continue;
    const int64_t row = row0 + r;
    if (ex.down_bias)
      for (int j = 0; j < k; ++j) v += route.weight[j] * ex.down_bias[route.id[j]][row];
    out[t * ex.n_embd + row] = accumulate ? out[t * ex.n_embd + row] + v : v;
  }
}

// The int8 dtypes, as launch_gemv_int8_multi takes them.
template <class F>
bool dispatch_int8(DType t, F&& f) {
  switch (t) {
    case DType::Q4_0:
      return f(std::integral_constant<DType, DType::Q4_0>{}), true;
    case DType::Q4_1:
      return f(std::integral_constant<DType, DType::Q4_1>{}), true;
    case DType::Q5_0:
      return f(std::integral_constant<DType, DType::Q5_0>{}), true;
    case DType::Q5_1:
      return f(std::integral_constant<DType, DType::Q5_1>{}), true;
    case DType::Q8_0:
      return f(std::integral_constant<DType, DType::Q8_0>{}), true;
    case DType::Q4_K:
      return f(std::integral_constant<DType, DType::Q4_K>{}), true;
    case DType::Q5_K:
      return f(std::integral_constant<DType, DType::Q5_K>{}), true;
    case DType::Q6_K:
      return f(std::integral_constant<DType, DType::Q6_K>{}), true;
    default:
      return false;
  }
}

}  // namespace

bool moe_gemv_int8_supports(DType t, int64_t n_embd, int64_t n_ff) {
  return uses_int8_gemv(t) && n_embd % 32 == 0 && n_ff % 32 == 0 && n_embd > 0 && n_ff > 0;
}

cudaError_t launch_moe_gate_up_int8(const MoeExperts& ex, const QuantizedActs& xa, int32_t* ids,
                                    int64_t n_tokens, int64_t k, float alpha, float limit,
                                    void* hq_buf, float* h, cudaStream_t s,
                                    const MoeRouter* route) {
  if (n_tokens <= 0) return cudaSuccess;
  if (!moe_gemv_int8_supports(ex.dtype, ex.n_embd, ex.n_ff) || k < 1 || k > 32 || !hq_buf ||
      xa.cols != ex.n_embd || xa.n_tokens != n_tokens || !moe_router_ok(route, k))
    return cudaErrorInvalidValue;
  const MoeRouter r = route ? *route : MoeRouter{};
  const QuantizedActs hq = quantized_acts_view(hq_buf, n_tokens * k, ex.n_ff);
  auto* q1 = const_cast<int8_t*>(hq.q1);
  auto* q2 = const_cast<int8_t*>(hq.q2);
  auto* sc = reinterpret_cast<float4*>(const_cast<float*>(hq.scales));
  const dim3 grid(unsigned(ex.n_ff / kBlockRows), unsigned(n_tokens * k)), block(kWarps * 32);
  cudaError_t err = cudaSuccess;
  if (!dispatch_int8(ex.dtype, [&](auto tag) {
        err = launch_pdl(moe_gate_up_int8_kernel<decltype(tag)::value>, grid, block, 0, s, ex, xa,
                         ids, int(k), r, alpha, limit, q1, q2, sc, h);
      }))
    return cudaErrorInvalidValue;
  return err;
}

cudaError_t launch_moe_down_int8(const MoeExperts& ex, const void* hq_buf, const int32_t* ids,
                                 const float* weights, int64_t n_tokens, int64_t k, float* out,
                                 bool accumulate, cudaStream_t s) {
  if (n_tokens <= 0) return cudaSuccess;
  if (!moe_gemv_int8_supports(ex.dtype, ex.n_embd, ex.n_ff) || k < 1 || k > 32 || !hq_buf)
    return cudaErrorInvalidValue;
  const QuantizedActs hq = quantized_acts_view(const_cast<void*>(hq_buf), n_tokens * k, ex.n_ff);
  cudaError_t err = cudaSuccess;
  if (!dispatch_int8(ex.dtype, [&](auto tag) {
        constexpr DType T = decltype(tag)::value;
        // n_embd % 32 == 0: whole blocks of kWarps * kDownRows rows (8 or 16).
        const dim3 grid(unsigned(ex.n_embd / (kWarps * kDownRows<T>)), unsigned(n_tokens));
        err = launch_pdl(moe_down_int8_kernel<T>, grid, dim3(kWarps * 32), 0, s, ex, hq, ids,
                         weights, int(k), out, accumulate);
      }))
    return cudaErrorInvalidValue;
  return err;
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
