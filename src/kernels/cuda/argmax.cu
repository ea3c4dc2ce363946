// The greedy pick on CUDA: argmax over a row of logits in one block (a 32k-152k vocabulary is
// 128-608 KB, a few microseconds for one SM), writing the next decode step's token and position.
// A batch of rows (a served decode step's greedy picks) takes one block per row.
#include <climits>
#include <cmath>

#include "kernels/cuda/argmax-ops.h"
#include "kernels/cuda/kernel-modules.cuh"

namespace hearth::cuda {

namespace {

constexpr int kThreads = 1024;

struct Best {
  float v;
  int i;
};

// b beats a: larger value, or the same value at a lower index. Values are never NaN here.
__device__ __forceinline__ Best better(Best a, Best b) {
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

// Each thread walks its indices in increasing order and keeps a strictly larger value only, so
// its pick is the lowest index of its maximum; NaN never compares larger. A thread that saw
// nothing above -inf holds (-inf, INT_MAX), which loses to every real pick. The block's pick
// reaches lane 0 of warp 0 (INT_MAX there: every value was -inf or NaN).
__device__ Best block_argmax(const float* __restrict__ logits, int n) {
  Best best{-INFINITY, INT_MAX};
  // (A row of a batch whose width is not a multiple of 4 may start off a 16-byte boundary: its
  // values are read one by one.)
  const int n4 = reinterpret_cast<uintptr_t>(logits) % 16 == 0 ? n / 4 : 0;
  const float4* l4 = reinterpret_cast<const float4*>(logits);
  for (int j = threadIdx.x; j < n4; j += kThreads) {
    const float4 q = l4[j];
    const int i = 4 * j;
    if (q.x > best.v) best = {q.x, i};
    if (q.y > best.v) best = {q.y, i + 1};
    if (q.z > best.v) best = {q.z, i + 2};
    if (q.w > best.v) best = {q.w, i + 3};
  }
  for (int i = 4 * n4 + int(threadIdx.x); i < n; i += kThreads)
    if (logits[i] > best.v) best = {logits[i], i};
  for (int off = 16; off > 0; off >>= 1) {
    const Best o{__shfl_xor_sync(0xffffffffu, best.v, off),
                 __shfl_xor_sync(0xffffffffu, best.i, off)};
    best = better(best, o);
  }
  __shared__ Best warp_best[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (warp != 0) return best;
  best = warp_best[lane];
  for (int off = 16; off > 0; off >>= 1) {
    const Best o{__shfl_xor_sync(0xffffffffu, best.v, off),
                 __shfl_xor_sync(0xffffffffu, best.i, off)};
    best = better(best, o);
  }
  return best;
}

__global__ void __launch_bounds__(kThreads)
    greedy_pick_kernel(const float* __restrict__ logits, int n, int32_t* token, int32_t* pos,
                       int32_t next_pos, int32_t* host_token) {
  const Best best = block_argmax(logits, n);
  if (threadIdx.x != 0) return;
  const int32_t id = best.i == INT_MAX ? 0 : best.i;
  *token = id;
  *pos = next_pos;
  *reinterpret_cast<volatile int32_t*>(host_token) = id;
  __threadfence_system();  // the host reads it after the event behind this kernel
}

// Block r: the pick of row r (rows of n values, `stride` floats apart).
__global__ void __launch_bounds__(kThreads)
    argmax_rows_kernel(const float* __restrict__ logits, int n, int64_t stride,
                       int32_t* __restrict__ ids) {
  const Best best = block_argmax(logits + int64_t(blockIdx.x) * stride, n);
  if (threadIdx.x == 0) ids[blockIdx.x] = best.i == INT_MAX ? 0 : best.i;
}

}  // namespace

cudaError_t launch_greedy_pick(const float* logits, int64_t n, int32_t* token, int32_t* pos,
                               int32_t next_pos, int32_t* host_token, cudaStream_t stream) {
  if (n <= 0 || n > INT_MAX || reinterpret_cast<uintptr_t>(logits) % 16 != 0)
    return cudaErrorInvalidValue;
  greedy_pick_kernel<<<1, kThreads, 0, stream>>>(logits, int(n), token, pos, next_pos, host_token);
  return cudaGetLastError();
}

cudaError_t launch_argmax_rows(const float* logits, int64_t rows, int64_t n, int32_t* ids,
                               cudaStream_t stream) {
  if (rows <= 0 || rows > INT_MAX || n <= 0 || n > INT_MAX) return cudaErrorInvalidValue;
  argmax_rows_kernel<<<unsigned(rows), kThreads, 0, stream>>>(logits, int(n), n, ids);
  return cudaGetLastError();
}

}  // namespace hearth::cuda

HEARTH_CUDA_MODULE()
