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

}  // namespace hearth::cuda
