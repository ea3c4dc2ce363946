// Decode-step fusions: ops that sit between two GEMVs merged with their neighbours so a token
// runs fewer, fuller kernels (each launch in a graph still costs ~1-3 us). rmsnorm and swiglu
// also emit the int8 activations of the next GEMV; rope + KV append is one kernel; a spin kernel
// for the profiler. New fusion: a launcher here, matched in backend/cuda/cuda-backend-ops.cpp.
#include "kernels/cuda/act-quant.cuh"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/gate-act.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rms-scale.cuh"
#include "kernels/cuda/rope-pair.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 256;

// Same arithmetic as rmsnorm.cu's kernel (so fused and unfused outputs agree bit for bit), then
// each warp quantizes whole 32-element blocks of the normalised row.
__global__ void __launch_bounds__(kThreads)
    rmsnorm_quant_kernel(const float* __restrict__ x, const float* __restrict__ w,
                         float* __restrict__ y, int64_t n, float eps, ActQuantOut qo) {
  pdl_trigger();
  // Block y of gridDim.y owns one kThreads-element slice: every block re-reads the row for the
  // sum (L2-resident), so the quantization spreads over many SMs instead of one.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t first = int64_t(blockIdx.y) * kThreads + int64_t(warp) * 32;
  // The norm weight does not come from the previous kernel: its first slice loads before the
  // wait, one DRAM round trip off the critical path.
  const float w_first = first < n ? __ldg(w + first + lane) : 0.f;
  pdl_wait();
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  const float scale = block_rms_scale<kThreads>(xr, n, eps);
  for (int64_t i0 = first; i0 < n; i0 += int64_t(gridDim.y) * kThreads) {
    const int64_t i = i0 + lane;
    const float v = xr[i] * scale * (i0 == first ? w_first : w[i]);
    yr[i] = v;
    quant_block32(v, lane, (int64_t(blockIdx.x) * n + i0) / 32, qo.q1, qo.q2, qo.scales);
  }
}

// act(gate) * up as elementwise.cu's gated kernel (gate-act.cuh), then each warp quantizes one
// 32-element block.
template <class Act>
__global__ void gated_quant_kernel(const float* gate, const float* up, float* out, int64_t n_blocks,
                                   ActQuantOut qo) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  for (int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; b < n_blocks;
       b += (int64_t(gridDim.x) * blockDim.x) >> 5) {
    const int64_t i = b * 32 + lane;
    const float v = Act{}(gate[i], up[i]);
    out[i] = v;
    quant_block32(v, lane, b, qo.q1, qo.q2, qo.scales);
  }
}

template <class Act>
cudaError_t launch_gated_quant(const float* gate, const float* up, float* out, int64_t rows,
                               int64_t n, void* qbuf, cudaStream_t s) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  if (n % 32 != 0 || !qbuf) return cudaErrorInvalidValue;
  const int64_t nb = rows * n / 32;
  int64_t blocks = (nb + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks > 8192) blocks = 8192;
  return launch_pdl(gated_quant_kernel<Act>, dim3(unsigned(blocks)), dim3(kThreads), 0, s, gate, up,
                    out, nb, act_quant_out(qbuf, rows, n));
}

// Threads [0, nq*half) rotate q pairs, the next nk*half rotate k pairs and store both rotated
// values into the K cache row; then v is copied into the V cache row (grid-stride).
__global__ void rope_kv_kernel(float* q, int64_t nq, float* k, int64_t nk, int64_t head_dim,
                               const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                               int style, float* k_cache, float* v_cache, const float* v) {
  pdl_trigger();
  pdl_wait();
  const int64_t half = head_dim / 2;
  const int64_t nqp = nq * half, nkp = nk * half, kv_floats = nk * head_dim;
  const int64_t p = *pos;
  float* krow = k_cache + p * kv_floats;
  float* vrow = v_cache + p * kv_floats;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < nqp + nkp + kv_floats;
       idx += int64_t(gridDim.x) * blockDim.x) {
    if (idx >= nqp + nkp) {
      const int64_t j = idx - nqp - nkp;
      vrow[j] = v[j];
      continue;
    }
    const bool is_k = idx >= nqp;
    const int64_t e = is_k ? idx - nqp : idx;
    const int64_t i = e % half, h = e / half;
    const float2 cs = rope_cos_sin(p, inv_freq[i]);
    rope_rotate_pair((is_k ? k : q) + h * head_dim, i, half, style, cs.x, cs.y,
                     is_k ? krow + h * head_dim : nullptr);
  }
}

__global__ void spin_kernel(long long ns) {
  long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 >= ns) break;
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t launch_rmsnorm_quant(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                                 float eps, void* qbuf, cudaStream_t s) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  if (n % 32 != 0 || !qbuf) return cudaErrorInvalidValue;
  int64_t slices = (n + kThreads - 1) / kThreads;
  if (slices > 64) slices = 64;
  if (x == y) slices = 1;  // in place: slices would race (rmsnorm.cu)
  return launch_pdl(rmsnorm_quant_kernel, dim3(unsigned(rows), unsigned(slices)), dim3(kThreads), 0,
                    s, x, w, y, n, eps, act_quant_out(qbuf, rows, n));
}

cudaError_t launch_swiglu_quant(const float* gate, const float* up, float* out, int64_t rows,
                                int64_t n, void* qbuf, cudaStream_t s) {
  return launch_gated_quant<SiluGate>(gate, up, out, rows, n, qbuf, s);
}

cudaError_t launch_gelu_tanh_gated_quant(const float* gate, const float* up, float* out,
                                         int64_t rows, int64_t n, void* qbuf, cudaStream_t s) {
  return launch_gated_quant<GeluTanhGate>(gate, up, out, rows, n, qbuf, s);
}

cudaError_t launch_rope_kv(float* q, int64_t nq, float* k, int64_t nk, int64_t head_dim,
                           const int32_t* pos, const float* inv_freq, int style, float* k_cache,
                           float* v_cache, const float* v, cudaStream_t s) {
  const int64_t total = (nq + nk) * (head_dim / 2) + nk * head_dim;
  if (total <= 0 || head_dim % 2 != 0) return cudaErrorInvalidValue;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  return launch_pdl(rope_kv_kernel, dim3(unsigned(blocks)), dim3(kThreads), 0, s, q, nq, k, nk,
                    head_dim, pos, inv_freq, style, k_cache, v_cache, v);
}

cudaError_t launch_spin(int64_t us, cudaStream_t s) {
  spin_kernel<<<1, 32, 0, s>>>(static_cast<long long>(us) * 1000);
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
