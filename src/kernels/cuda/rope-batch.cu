// The decode step of many sequences, its RoPE and K/V append (launch_rope_kv_batch, cuda-ops.h
// AttnSegment): every segment's q and k rotated at its own position and its k and v stored to
// row pos of its own cache, in one launch (q8_0 caches: a second, warp-collective store launch).
// The attention kernels of attention-batch.cu read the rows then; where a step's attention takes
// the rotation and append itself (its merged blocks, the decode kernels), this launch is skipped.
#include <algorithm>

#include "kernels/cuda/decode-batch.h"
#include "kernels/cuda/kernel-modules.cuh"
#include "kernels/cuda/kv-rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope-pair.cuh"

namespace hearth::cuda {

namespace {

// The cache row of position pos: a ring's (ring_rows > 0) wraps.
__device__ __forceinline__ int64_t cache_row(int32_t pos, int ring_rows) {
  return ring_rows > 0 ? pos % ring_rows : pos;
}

// One thread per rotated pair (q heads then k heads, every segment) and, for the plain cache
// types (F32, F16, BF16), per v element, k and v stored to row pos of each segment's cache in
// kv_store_plain's rounding; q8_0 caches get k and v from store_kv_batch_kernel (its blocks'
// scales need a warp).
__global__ void rope_kv_batch_kernel(float* q, int nq, float* k, int nk, const float* v, int hd,
                                     const AttnSegment* segs, int n_segs, const float* inv_freq,
                                     int style, DType type, int ring_rows, float mscale) {
  pdl_trigger();
  pdl_wait();
  const bool store = type != DType::Q8_0;
  const int half = hd / 2, kvd = nk * hd;
  const int64_t pairs = int64_t(n_segs) * (nq + nk) * half;
  const int64_t total = pairs + (store ? int64_t(n_segs) * kvd : 0);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < pairs) {
      const int p = int(i % half);
      const int64_t hs = i / half;
      const int h = int(hs % (nq + nk)), s = int(hs / (nq + nk));
      const AttnSegment seg = segs[s];
      const float2 cs = rope_cos_sin(seg.pos, __ldg(inv_freq + p));
      const float c = cs.x * mscale, sn = cs.y * mscale;  // (x 1 is exact)
      if (h < nq) {
        rope_rotate_pair(q + (int64_t(s) * nq + h) * hd, p, half, style, c, sn);
      } else {
        const int kh = h - nq;
        float* row = k + (int64_t(s) * nk + kh) * hd;
        rope_rotate_pair(row, p, half, style, c, sn);
        if (store) {
          const int a = style == 0 ? 2 * p : p, b = style == 0 ? 2 * p + 1 : p + half;
          const int64_t e0 = cache_row(seg.pos, ring_rows) * kvd + kh * hd;
          auto* cache = static_cast<uint8_t*>(seg.k_cache);
          kv_store_plain(cache, e0 + a, row[a], type);
          kv_store_plain(cache, e0 + b, row[b], type);
        }
      }
    } else {
      const int64_t e = i - pairs;
      const int s = int(e / kvd), c = int(e % kvd);
      const AttnSegment seg = segs[s];
      kv_store_plain(static_cast<uint8_t*>(seg.v_cache), cache_row(seg.pos, ring_rows) * kvd + c,
                     v[e], type);
    }
  }
}

// One warp per 32 elements of a segment's k or v row: row pos of its cache, rounded and packed
// as `type` (kv_store_warp: the CPU's rounding).
__global__ void store_kv_batch_kernel(const float* k, const float* v, int kvd,
                                      const AttnSegment* segs, int n_segs, DType type,
                                      int ring_rows) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(n_segs) * 2 * (kvd / 32);
  for (int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; w < warps;
       w += (int64_t(gridDim.x) * blockDim.x) >> 5) {
    const int block = int(w % (kvd / 32));
    const int64_t sv = w / (kvd / 32);
    const int s = int(sv / 2);
    const bool is_v = sv % 2;
    const AttnSegment seg = segs[s];
    const int64_t e = cache_row(seg.pos, ring_rows) * kvd + block * 32 + lane;
    const float x = (is_v ? v : k)[int64_t(s) * kvd + block * 32 + lane];
    kv_store_warp(static_cast<uint8_t*>(is_v ? seg.v_cache : seg.k_cache), e, x, type, lane);
  }
}

}  // namespace

cudaError_t launch_rope_kv_batch(float* q, int64_t nq, float* k, int64_t nk, const float* v,
                                 int64_t head_dim, const AttnSegment* segs, int64_t n_segs,
                                 DType cache_type, const float* inv_freq, int style, cudaStream_t s,
                                 int ring_rows, float mscale) {
  if (n_segs <= 0) return cudaSuccess;
  if (head_dim % 2 != 0 || !is_cuda_kv_type(cache_type) || ring_rows < 0)
    return cudaErrorInvalidValue;
  const bool plain = cache_type != DType::Q8_0;
  const int64_t kvd = nk * head_dim;
  if (!plain && kvd % 32 != 0) return cudaErrorInvalidValue;
  const int64_t total = n_segs * ((nq + nk) * (head_dim / 2) + (plain ? kvd : 0));
  const unsigned grid = unsigned(std::min<int64_t>((total + 255) / 256, 65535));
  cudaError_t e =
      launch_pdl(rope_kv_batch_kernel, dim3(grid), dim3(256), 0, s, q, int(nq), k, int(nk), v,
                 int(head_dim), segs, int(n_segs), inv_freq, style, cache_type, ring_rows, mscale);
  if (e != cudaSuccess || plain) return e;
  const int64_t threads = n_segs * 2 * kvd;  // a lane per element
  return launch_pdl(store_kv_batch_kernel,
                    dim3(unsigned(std::min<int64_t>((threads + 255) / 256, 65535))), dim3(256), 0,
                    s, static_cast<const float*>(k), v, int(kvd), segs, int(n_segs), cache_type,
                    ring_rows);
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
