// Element-wise ops on CUDA: SwiGLU, GELU-tanh gate, soft-cap, scale, residual add, bias add, KV
// row store (f32 rows at the step position; typed and ring stores are kv-store.cu), fill, and
// the small host tables a kernel writes from its parameters (launch_param_table). Grid-stride
// loops; these are memory-bound and a small share of a token next to matmul.
#include <cstring>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/gate-act.cuh"
#include "kernels/cuda/half-mma.cuh"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/x-split.cuh"

namespace hearth::cuda {

namespace {

unsigned grid_for(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return unsigned(b < 8192 ? (b > 0 ? b : 1) : 8192);
}

#define HEARTH_GRID_STRIDE(i, n)                                            \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// act(gate) * up (gate-act.cuh). xh: also out's fp16 copy for the batched matmul
// (launch_batch_x_half's order).
template <class Act>
__global__ void gated_kernel(const float* gate, const float* up, float* out, int64_t n,
                             __half* xh) {
  pdl_trigger();
  pdl_wait();
  HEARTH_GRID_STRIDE(i, n) {
    const float v = Act{}(gate[i], up[i]);
    out[i] = v;
    if (xh) xh[batch_half_index(i)] = __float2half_rn(v);
  }
}

// Four values a thread (16-byte loads), out plus its split forms for the down projection's
// prefill GEMM (x-split.cuh). n4 = n / 4; every pointer 16-byte aligned (lo8: 4-byte).
__global__ void swiglu_split_kernel(const float4* gate, const float4* up, float4* out, int64_t n4,
                                    uint2* hi, uint32_t* lo8, float* lo_scale) {
  pdl_trigger();
  pdl_wait();
  if (blockIdx.x == 0 && threadIdx.x == 0) *lo_scale = kLoE5m2Scale;
  HEARTH_GRID_STRIDE(i, n4) {
    const float4 g = gate[i], u = up[i];
    const SiluGate act;
    const float4 o = make_float4(act(g.x, u.x), act(g.y, u.y), act(g.z, u.z), act(g.w, u.w));
    out[i] = o;
    __align__(8) __half h[4];
    __align__(4) __nv_fp8_storage_t l[4];
    split_one(o.x, h[0], l[0]);
    split_one(o.y, h[1], l[1]);
    split_one(o.z, h[2], l[2]);
    split_one(o.w, h[3], l[3]);
    hi[i] = *reinterpret_cast<const uint2*>(h);
    lo8[i] = *reinterpret_cast<const uint32_t*>(l);
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  pdl_trigger();
  pdl_wait();
  HEARTH_GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void bias_kernel(float* y, const float* bias, int64_t rows, int64_t n) {
  HEARTH_GRID_STRIDE(i, rows * n) y[i] += bias[i % n];
}

// pos is read on the device so a captured decode graph appends at the current position.
__global__ void store_rows_offset_kernel(float* cache, const float* src, const int32_t* pos,
                                         int64_t row_floats, int64_t count) {
  pdl_trigger();
  pdl_wait();
  float* dst = cache + int64_t(*pos) * row_floats;
  HEARTH_GRID_STRIDE(i, count) dst[i] = src[i];
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  pdl_trigger();
  pdl_wait();
  HEARTH_GRID_STRIDE(i, n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  pdl_trigger();
  pdl_wait();
  HEARTH_GRID_STRIDE(i, n) x[i] *= s;
}

__global__ void fill_kernel(float* p, float v, int64_t n) {
  HEARTH_GRID_STRIDE(i, n) p[i] = v;
}

// A small host table written by the kernel that carries it as its parameter. Its writes go to
// memory no earlier kernel of the stream touches (the caller's fresh ring space), so they happen
// before the wait; the wait keeps the chain's order (the next kernel may rely on this one having
// completed only after the one before it).
__global__ void param_table_kernel(ParamTable t, uint4* dst, int n16) {
  pdl_trigger();
  for (int i = int(threadIdx.x); i < n16; i += int(blockDim.x)) dst[i] = t.words[i];
  pdl_wait();
}

__global__ void copy16_kernel(float4* dst, const float4* src, int64_t n4) {
  HEARTH_GRID_STRIDE(i, n4) dst[i] = __ldg(src + i);
}

}  // namespace

cudaError_t launch_copy16(float* dst, const float* src, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  copy16_kernel<<<132 * 16, 256, 0, s>>>(reinterpret_cast<float4*>(dst),
                                         reinterpret_cast<const float4*>(src), n / 4);
  return cudaGetLastError();
}

bool swiglu_split_able(const float* gate, const float* up, const float* out, int64_t n,
                       const XSplitOut& split) {
  const auto a = [](const void* p, uintptr_t m) {
    return (reinterpret_cast<uintptr_t>(p) & m) == 0;
  };
  return n % 4 == 0 && a(gate, 15) && a(up, 15) && a(out, 15) && a(split.hi, 15) &&
         a(split.lo8, 3) && split.scale;
}

cudaError_t launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s,
                          const XSplitOut* split, void* xh) {
  if (n <= 0) return cudaSuccess;
  if (xh && (split || n % 4 != 0)) return cudaErrorInvalidValue;
  if (split) {
    if (!swiglu_split_able(gate, up, out, n, *split)) return cudaErrorInvalidValue;
    return launch_pdl(swiglu_split_kernel, dim3(grid_for(n / 4)), dim3(256), 0, s,
                      reinterpret_cast<const float4*>(gate), reinterpret_cast<const float4*>(up),
                      reinterpret_cast<float4*>(out), n / 4, static_cast<uint2*>(split->hi),
                      reinterpret_cast<uint32_t*>(split->lo8), split->scale);
  }
  return launch_pdl(gated_kernel<SiluGate>, dim3(grid_for(n)), dim3(256), 0, s, gate, up, out, n,
                    static_cast<__half*>(xh));
}

cudaError_t launch_add_inplace(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  return launch_pdl(add_kernel, dim3(grid_for(n)), dim3(256), 0, s, y, x, n);
}

cudaError_t launch_add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  bias_kernel<<<grid_for(rows * n), 256, 0, s>>>(y, bias, rows, n);
  return cudaGetLastError();
}

cudaError_t launch_store_rows(float* cache, const float* src, const int32_t* pos,
                              int64_t row_floats, int64_t n_tokens, cudaStream_t s) {
  const int64_t count = row_floats * n_tokens;
  if (count <= 0) return cudaSuccess;
  return launch_pdl(store_rows_offset_kernel, dim3(grid_for(count)), dim3(256), 0, s, cache, src,
                    pos, row_floats, count);
}

cudaError_t launch_gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n,
                                   cudaStream_t s, void* xh) {
  if (n <= 0) return cudaSuccess;
  if (xh && n % 4 != 0) return cudaErrorInvalidValue;
  return launch_pdl(gated_kernel<GeluTanhGate>, dim3(grid_for(n)), dim3(256), 0, s, gate, up, out,
                    n, static_cast<__half*>(xh));
}

cudaError_t launch_softcap(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (!(cap > 0)) return cudaErrorInvalidValue;
  return launch_pdl(softcap_kernel, dim3(grid_for(n)), dim3(256), 0, s, x, n, cap);
}

cudaError_t launch_scale(float* x, int64_t n, float factor, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  return launch_pdl(scale_kernel, dim3(grid_for(n)), dim3(256), 0, s, x, n, factor);
}

cudaError_t launch_param_table(const void* src, size_t bytes, void* dst, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (bytes > sizeof(ParamTable::words) || (reinterpret_cast<uintptr_t>(dst) & 15) != 0)
    return cudaErrorInvalidValue;
  const int n16 = int((bytes + 15) / 16);
  ParamTable t;
  std::memcpy(t.words, src, bytes);
  std::memset(reinterpret_cast<uint8_t*>(t.words) + bytes, 0, size_t(n16) * 16 - bytes);
  return launch_pdl(param_table_kernel, dim3(1), dim3(256), 0, s, t, static_cast<uint4*>(dst), n16);
}

cudaError_t launch_fill(float* p, float value, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  fill_kernel<<<grid_for(n), 256, 0, s>>>(p, value, n);
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
