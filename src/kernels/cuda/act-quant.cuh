// Device helper shared by every kernel that quantizes decode activations for the integer GEMV
// (gemv-int8.cu's own pass and the fused rmsnorm/swiglu/attention epilogues in fused.cu and
// attention.cu). One warp = one 32-element block; change the format here only.
#pragma once

#include <cstdint>

namespace hearth::cuda {

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

}  // namespace hearth::cuda
