// The MoE gather-GEMVs (moe-ops.h): decode reads only the routed experts' rows. Weights are
// decoded eight elements at a time by dq8<> (quant-device.cuh, every CUDA dtype including MXFP4)
// against f32 activations; one warp per output row. Also the plain dq8 GEMV that matmul.cu runs
// for the dtypes without an int8 GEMV kernel.
#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/moe-act.cuh"
#include "kernels/cuda/moe-ops.h"
#include "kernels/cuda/moe-route.cuh"
#include "kernels/cuda/warp-reduce.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 8;  // warps per block, one output row each

// Group g (8 elements) of row `row` of w against x[8g .. 8g + 8) (16-byte aligned).
template <DType T>
__device__ __forceinline__ float dot8(const DeviceWeight& w, int64_t row, int64_t g,
                                      const float* __restrict__ x) {
  float v[8];
  dq8<T>(w, row, g, v);
  const float4 a = __ldg(reinterpret_cast<const float4*>(x + g * 8));
  const float4 b = __ldg(reinterpret_cast<const float4*>(x + g * 8) + 1);
  return v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z +
         v[7] * b.w;
}

// grid (n_ff / kWarps, S): slot blockIdx.y's expert, gate and up rows interleaved so both
// streams' loads are in flight together.
template <DType T>
__global__ void __launch_bounds__(kWarps * 32)
    moe_gate_up_kernel(MoeExperts ex, const float* __restrict__ x, int32_t* __restrict__ ids, int k,
                       MoeRouter route, float alpha, float limit, float* __restrict__ h) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp, s = blockIdx.y;
  const int e = gate_up_expert(route, ids, k, s);
  if (row >= ex.n_ff) return;
  const DeviceWeight gw = ex.gate[e], uw = ex.up[e];
  const float* xt = x + (s / k) * ex.n_embd;
  const int64_t ng = ex.n_embd / 8;
  float g = 0, u = 0;
#pragma unroll 4
  for (int64_t i = lane; i < ng; i += 32) {
    g += dot8<T>(gw, row, i, xt);
    u += dot8<T>(uw, row, i, xt);
  }
  g = warp_sum(g);
  u = warp_sum(u);
  if (lane != 0) return;
  if (ex.gate_bias) g += ex.gate_bias[e][row], u += ex.up_bias[e][row];
  h[s * ex.n_ff + row] = moe_act(g, u, alpha, limit);
}

// grid (n_embd / kWarps, T): output row `row` of token blockIdx.y over its k experts. The lanes
// split the k * (n_ff / 8) groups between them (all experts' loads in flight at once), each
// group scaled by its slot's routing weight; the order is fixed, so the sum is deterministic.
template <DType T>
__global__ void __launch_bounds__(kWarps * 32)
    moe_down_kernel(MoeExperts ex, const float* __restrict__ h, const int32_t* __restrict__ ids,
                    const float* __restrict__ weights, int k, float* out, bool accumulate) {
  __shared__ MoeDownRoute route;
  const int64_t t = blockIdx.y;
  stage_down_route(route, ex, ids, weights, k, t);
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= ex.n_embd) return;
  const int64_t ng = ex.n_ff / 8, items = ng * k;
  float acc = 0;
#pragma unroll 4
  for (int64_t i = lane; i < items; i += 32) {
    const int j = int(i / ng);
    const int64_t g = i - j * ng;
    acc += route.weight[j] * dot8<T>(route.w[j], row, g, h + (t * k + j) * ex.n_ff);
  }
  acc = warp_sum(acc);
  if (lane != 0) return;
  if (ex.down_bias)
    for (int j = 0; j < k; ++j) acc += route.weight[j] * ex.down_bias[route.id[j]][row];
  out[t * ex.n_embd + row] = accumulate ? out[t * ex.n_embd + row] + acc : acc;
}

template <DType T>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_dq8_kernel(DeviceWeight w, const float* __restrict__ x, int n_tokens,
                    float* __restrict__ y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= w.rows) return;
  const int64_t ng = w.cols / 8;
  float acc[kGemvMaxTokens] = {};
  for (int64_t g = lane; g < ng; g += 32) {
    float v[8];
    dq8<T>(w, row, g, v);
#pragma unroll
    for (int t = 0; t < kGemvMaxTokens; ++t) {
      if (t >= n_tokens) break;
      const float* xt = x + t * w.cols + g * 8;
      for (int i = 0; i < 8; ++i) acc[t] += v[i] * xt[i];
    }
  }
#pragma unroll
  for (int t = 0; t < kGemvMaxTokens; ++t) {
    if (t >= n_tokens) break;
    const float sum = warp_sum(acc[t]);
    if (lane == 0) y[t * w.rows + row] = sum;
  }
}

unsigned row_blocks(int64_t rows) {
  return unsigned((rows + kWarps - 1) / kWarps);
}

}  // namespace

bool moe_gemv_supports(DType t, int64_t cols) {
  return supports_dtype(t) && cols % 8 == 0;
}

cudaError_t launch_moe_gate_up(const MoeExperts& ex, const float* x, int32_t* ids, int64_t n_tokens,
                               int64_t k, float alpha, float limit, float* h, cudaStream_t s,
                               const MoeRouter* route) {
  if (n_tokens <= 0) return cudaSuccess;
  if (!moe_gemv_supports(ex.dtype, ex.n_embd) || k < 1 || k > 32 || !moe_router_ok(route, k))
    return cudaErrorInvalidValue;
  const MoeRouter r = route ? *route : MoeRouter{};
  const dim3 grid(row_blocks(ex.n_ff), unsigned(n_tokens * k));
  if (!dispatch_dtype(ex.dtype, [&](auto tag) {
        moe_gate_up_kernel<decltype(tag)::value>
            <<<grid, kWarps * 32, 0, s>>>(ex, x, ids, int(k), r, alpha, limit, h);
      }))
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_moe_down(const MoeExperts& ex, const float* h, const int32_t* ids,
                            const float* weights, int64_t n_tokens, int64_t k, float* out,
                            bool accumulate, cudaStream_t s) {
  if (n_tokens <= 0) return cudaSuccess;
  if (!moe_gemv_supports(ex.dtype, ex.n_ff) || k < 1 || k > 32) return cudaErrorInvalidValue;
  const dim3 grid(row_blocks(ex.n_embd), unsigned(n_tokens));
  if (!dispatch_dtype(ex.dtype, [&](auto tag) {
        moe_down_kernel<decltype(tag)::value>
            <<<grid, kWarps * 32, 0, s>>>(ex, h, ids, weights, int(k), out, accumulate);
      }))
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_gemv_dq8(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y,
                            cudaStream_t s) {
  if (n_tokens <= 0 || w.rows <= 0) return cudaSuccess;
  if (!moe_gemv_supports(w.dtype, w.cols) || n_tokens > kGemvMaxTokens)
    return cudaErrorInvalidValue;
  if (!dispatch_dtype(w.dtype, [&](auto tag) {
        gemv_dq8_kernel<decltype(tag)::value>
            <<<row_blocks(w.rows), kWarps * 32, 0, s>>>(w, x, int(n_tokens), y);
      }))
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
