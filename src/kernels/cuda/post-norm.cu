// The sandwich norms' step between two blocks (Gemma 2/3): the block's output y normalised and
// added to the residual x, then x normalised for the next block (with its int8 or fp16 form for
// the next matmul), as one launch. Unfused that is an rmsnorm in place on y, an add and another
// rmsnorm: three launches where a pre-norm family has one, twice a layer (gemma2-9b: 126 more
// launches a token, each a DRAM round trip and a launch gap on the critical path).
// One block a row holds the row in registers across both norms, so nothing is re-read and no
// other block can see x half-updated (a row in slices over several blocks, as the plain rmsnorm
// runs, would race: every slice reads all of x for its sum while the others write theirs).
#include <cuda_fp16.h>

#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rms-scale.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kDepth = 4;  // float4s a thread takes per pass over the row, as block_rms_scale
constexpr int kPassFloats = kDepth * kThreads * 4;
constexpr int kMaxPasses = 2;  // rows of up to 8,192 floats (Gemma 3 27B's is 5,376)

template <int kPasses>
using RowRegs = float4[kPasses][kDepth];

// block_rms_scale<kThreads>'s value (rms-scale.cuh) for a row this block holds in registers,
// thread t holding the float4s p * kDepth * kThreads + k * kThreads + t: the same fma chain per
// thread in the same order (pass, load, component; zeros past the row, as it loads them) and the
// same reduction. So the fused step's scales are the separate launches' bits.
template <int kPasses>
__device__ __forceinline__ float rms_scale_of(const RowRegs<kPasses>& v, int64_t n, float eps,
                                              float* partial) {
  float ss = 0.f;
#pragma unroll
  for (int p = 0; p < kPasses; ++p)
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      ss = fmaf(v[p][k].x, v[p][k].x, ss);
      ss = fmaf(v[p][k].y, v[p][k].y, ss);
      ss = fmaf(v[p][k].z, v[p][k].z, ss);
      ss = fmaf(v[p][k].w, v[p][k].w, ss);
    }
  return block_rms_of_sums<kThreads>(ss, n, eps, partial);
}

// This thread's float4s of a row of n4 (zeros past it, or everywhere without src).
template <int kPasses>
__device__ __forceinline__ void load_row(RowRegs<kPasses>& v, const float4* src, int64_t n4) {
#pragma unroll
  for (int p = 0; p < kPasses; ++p)
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      const int64_t i = int64_t(p) * kDepth * kThreads + k * kThreads + threadIdx.x;
      v[p][k] = src && i < n4 ? src[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// (v * scale) * w, rounded as the plain kernels round it: __fmul_rn keeps the compiler from
// folding a product into the add that follows (an fma would round once, not twice).
__device__ __forceinline__ float4 scaled(float4 v, float s, float4 w) {
  return make_float4(__fmul_rn(__fmul_rn(v.x, s), w.x), __fmul_rn(__fmul_rn(v.y, s), w.y),
                     __fmul_rn(__fmul_rn(v.z, s), w.z), __fmul_rn(__fmul_rn(v.w, s), w.w));
}

template <int kPasses>
__global__ void __launch_bounds__(kThreads)
    post_norm_add_kernel(float* y, const float* __restrict__ w_post, float* x, int64_t n, float eps,
                         const float* __restrict__ w_next, float* xn, ActQuantOut qo,
                         __half* __restrict__ xh) {
  pdl_trigger();
  __shared__ float partial[2][kThreads / 32];
  const int64_t n4 = n / 4;
  const int64_t row4 = int64_t(blockIdx.x) * n4;
  const auto at = [](int p, int k) { return int64_t(p) * kDepth * kThreads + k * kThreads; };
  // The norm weights do not come from the previous kernel: they load before the wait.
  RowRegs<kPasses> wp, wn;
  load_row<kPasses>(wp, reinterpret_cast<const float4*>(w_post), n4);
  load_row<kPasses>(wn, reinterpret_cast<const float4*>(w_next), n4);
  pdl_wait();
  auto* y4 = reinterpret_cast<float4*>(y) + row4;
  auto* x4 = reinterpret_cast<float4*>(x) + row4;
  RowRegs<kPasses> v, r;
  load_row<kPasses>(v, y4, n4);
  load_row<kPasses>(r, x4, n4);
  // x += (y * s1) * w_post, as the in-place norm's stored value added by the add kernel.
  const float s1 = rms_scale_of<kPasses>(v, n, eps, partial[0]);
#pragma unroll
  for (int p = 0; p < kPasses; ++p)
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      const float4 t = scaled(v[p][k], s1, wp[p][k]);
      float4& o = r[p][k];
      o = make_float4(__fadd_rn(o.x, t.x), __fadd_rn(o.y, t.y), __fadd_rn(o.z, t.z),
                      __fadd_rn(o.w, t.w));
      const int64_t i = at(p, k) + threadIdx.x;
      if (i < n4) x4[i] = o;
    }
  if (!w_next) return;
  const float s2 = rms_scale_of<kPasses>(r, n, eps, partial[1]);
  auto* xn4 = reinterpret_cast<float4*>(xn) + row4;
#pragma unroll
  for (int p = 0; p < kPasses; ++p)
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      const int64_t i = at(p, k) + threadIdx.x;
      const float4 o = scaled(r[p][k], s2, wn[p][k]);
      if (i < n4) xn4[i] = o;            // (xn may be y: this thread alone read these words of it)
      const int64_t e = (row4 + i) * 4;  // o's first element in [rows, n]
      if (qo.q1) {
        // A 32-element block is 8 lanes' float4s (n % 32 == 0): a group is in the row or not.
        quant_block32_x4(o, int(threadIdx.x & 31), e / 32, i < n4, qo.q1, qo.q2, qo.scales);
      } else if (xh && i < n4) {
        // launch_batch_x_half's order swaps the middle two of every four.
        const __half2 lo = __floats2half2_rn(o.x, o.z), hi = __floats2half2_rn(o.y, o.w);
        *reinterpret_cast<uint2*>(xh + e) = make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                                                       *reinterpret_cast<const uint32_t*>(&hi));
      }
    }
}

}  // namespace

bool post_norm_add_fits(int64_t n) {
  return n > 0 && n % 32 == 0 && n <= kMaxPasses * kPassFloats;
}

cudaError_t launch_post_norm_add(float* y, const float* w_post, float* x, int64_t rows, int64_t n,
                                 float eps, const float* w_next, float* xn, void* qbuf, void* xh,
                                 cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (!post_norm_add_fits(n) || !aligned(y) || !aligned(x) || !aligned(w_post) ||
      (w_next && (!aligned(w_next) || !aligned(xn))) || ((qbuf || xh) && !w_next) || (qbuf && xh))
    return cudaErrorInvalidValue;
  const ActQuantOut qo = act_quant_out(qbuf, rows, n);
  auto* h = static_cast<__half*>(xh);
  if (n <= kPassFloats)
    return launch_pdl(post_norm_add_kernel<1>, dim3(unsigned(rows)), dim3(kThreads), 0, s, y,
                      w_post, x, n, eps, w_next, xn, qo, h);
  return launch_pdl(post_norm_add_kernel<2>, dim3(unsigned(rows)), dim3(kThreads), 0, s, y, w_post,
                    x, n, eps, w_next, xn, qo, h);
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
