// Device helper shared by every kernel that quantizes decode activations for the integer GEMV
// (gemv-int8.cu's own pass and the fused rmsnorm/swiglu/attention epilogues in fused.cu and
// attention.cu). One warp = one 32-element block; change the format here only.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda-ops.h"

namespace hearth::cuda {

// A quantized_acts_bytes() buffer as the pointers a producer writes (quantized_acts_view's
// layout); q1 null: the producer writes no int8 form.
struct ActQuantOut {
  int8_t* q1 = nullptr;
  int8_t* q2 = nullptr;
  float4* scales = nullptr;
};

inline ActQuantOut act_quant_out(void* buf, int64_t rows, int64_t n) {
  if (!buf) return {};
  const QuantizedActs v = quantized_acts_view(buf, rows, n);
  return {const_cast<int8_t*>(v.q1), const_cast<int8_t*>(v.q2),
          reinterpret_cast<float4*>(const_cast<float*>(v.scales))};
}

// v: this lane's element of block `blk` (flat index blk*32 + lane into [T, cols]). Writes
// q1 = round(v/d1), the residual level q2 and the float4 (d1, d2, 0, d1*sum(q1)). All 32 lanes
// of the warp must call it together.
__device__ __forceinline__ void quant_block32(float v, int lane, int64_t blk, int8_t* q1,
                                              int8_t* q2, float4* scales) {
  float a = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
  const float d1 = a / 127.f;
  const int i1 = d1 > 0.f ? max(-127, min(127, __float2int_rn(v / d1))) : 0;
  const float r = v - d1 * float(i1);
  float a2 = fabsf(r);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a2 = fmaxf(a2, __shfl_xor_sync(0xffffffffu, a2, o));
  const float d2 = a2 / 127.f;
  const int i2 = d2 > 0.f ? max(-127, min(127, __float2int_rn(r / d2))) : 0;
  int s1 = i1;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s1 += __shfl_xor_sync(0xffffffffu, s1, o);
  q1[blk * 32 + lane] = int8_t(i1);
  q2[blk * 32 + lane] = int8_t(i2);
  if (lane == 0) scales[blk] = make_float4(d1, d2, 0.f, d1 * float(s1));
}

// quant_block32 of N blocks at once (this lane's element v[i] of block blk[i], i < n: a
// warp-uniform count), the same arithmetic per block, with the N blocks' butterflies interleaved
// so their shuffles overlap (one block at a time waited out 15 shuffle latencies per block).
template <int N>
__device__ __forceinline__ void quant_blocks32(const float (&v)[N], int lane,
                                               const int64_t (&blk)[N], int n, int8_t* q1,
                                               int8_t* q2, float4* scales) {
  float a[N], r[N], d1[N], d2[N];
  int i1[N], s1[N];
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = fabsf(v[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = fmaxf(a[i], __shfl_xor_sync(0xffffffffu, a[i], o));
#pragma unroll
  for (int i = 0; i < N; ++i) {
    d1[i] = a[i] / 127.f;
    i1[i] = d1[i] > 0.f ? max(-127, min(127, __float2int_rn(v[i] / d1[i]))) : 0;
    r[i] = v[i] - d1[i] * float(i1[i]);
    a[i] = fabsf(r[i]);
    s1[i] = i1[i];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) {
      a[i] = fmaxf(a[i], __shfl_xor_sync(0xffffffffu, a[i], o));
      s1[i] += __shfl_xor_sync(0xffffffffu, s1[i], o);
    }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i >= n) break;
    d2[i] = a[i] / 127.f;
    const int i2 = d2[i] > 0.f ? max(-127, min(127, __float2int_rn(r[i] / d2[i]))) : 0;
    q1[blk[i] * 32 + lane] = int8_t(i1[i]);
    q2[blk[i] * 32 + lane] = int8_t(i2);
    if (lane == 0) scales[blk[i]] = make_float4(d1[i], d2[i], 0.f, d1[i] * float(s1[i]));
  }
}

// quant_block32 of a block that 8 consecutive lanes hold four elements each (lane & 7: which
// four), for kernels that keep rows as float4s. The block's max and sum do not depend on the
// order they are taken in, so the bits are quant_block32's. All 32 lanes must call it together;
// blk: this lane's group's block; store: whether the group's block exists (same in all 8 lanes).
__device__ __forceinline__ void quant_block32_x4(float4 v, int lane, int64_t blk, bool store,
                                                 int8_t* q1, int8_t* q2, float4* scales) {
  const float e[4] = {v.x, v.y, v.z, v.w};
  float a = fmaxf(fmaxf(fabsf(e[0]), fabsf(e[1])), fmaxf(fabsf(e[2]), fabsf(e[3])));
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
  const float d1 = a / 127.f;
  int i1[4], s1 = 0;
  float r[4], a2 = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    i1[j] = d1 > 0.f ? max(-127, min(127, __float2int_rn(e[j] / d1))) : 0;
    r[j] = e[j] - d1 * float(i1[j]);
    a2 = fmaxf(a2, fabsf(r[j]));
    s1 += i1[j];
  }
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) {
    a2 = fmaxf(a2, __shfl_xor_sync(0xffffffffu, a2, o));
    s1 += __shfl_xor_sync(0xffffffffu, s1, o);
  }
  const float d2 = a2 / 127.f;
  char4 c1, c2;
  int i2[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) i2[j] = d2 > 0.f ? max(-127, min(127, __float2int_rn(r[j] / d2))) : 0;
  c1 = make_char4(char(i1[0]), char(i1[1]), char(i1[2]), char(i1[3]));
  c2 = make_char4(char(i2[0]), char(i2[1]), char(i2[2]), char(i2[3]));
  if (!store) return;
  const int64_t at = blk * 32 + (lane & 7) * 4;
  *reinterpret_cast<char4*>(q1 + at) = c1;
  *reinterpret_cast<char4*>(q2 + at) = c2;
  if ((lane & 7) == 0) scales[blk] = make_float4(d1, d2, 0.f, d1 * float(s1));
}

}  // namespace hearth::cuda
