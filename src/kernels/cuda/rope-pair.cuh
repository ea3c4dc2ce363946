// The angles and the rotation the CUDA rope kernels (rope.cu per element, rope-prefill.cu per
// token or from a table, fused.cu and attention.cu in decode) apply to one pair of a head's
// elements, so they cannot drift apart. A new rope style: its pair indexing here.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace hearth::cuda {

// A rotated value as a cache row element: f32 rows as they are, f16 rows rounded to nearest
// (kv_store_plain's rounding, so a row written here reads as launch_store_kv's).
__device__ __forceinline__ float cache_value(float v, float*) {
  return v;
}
__device__ __forceinline__ __half cache_value(float v, __half*) {
  return __float2half_rn(v);
}

// (cos, sin) of the angle pos * inv_freq, computed in double and rounded to float: every CUDA
// rope path (rope.cu, rope-prefill.cu, fused.cu, attention.cu) takes its angles from here, so
// decode and prefill rotate by the same floats.
__device__ __forceinline__ float2 rope_cos_sin(int64_t pos, float inv_freq) {
  double sd, cd;
  sincos(double(pos) * double(inv_freq), &sd, &cd);
  return make_float2(float(cd), float(sd));
}

// Rotates pair i (of half = head_dim / 2) of head vector v by the angle whose cosine and sine
// are c and s. style 0 (interleaved): elements (2i, 2i+1); style 1 (halves): (i, i + half).
// copy_to, when set, receives the rotated pair at the same indices too (a K cache row of f32 or
// f16 elements).
template <class Row = float>
__device__ __forceinline__ void rope_rotate_pair(float* v, int64_t i, int64_t half, int style,
                                                 float c, float s, Row* copy_to = nullptr) {
  const int64_t a = style == 0 ? 2 * i : i;
  const int64_t b = style == 0 ? 2 * i + 1 : i + half;
  const float x0 = v[a], x1 = v[b];
  const float r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
  v[a] = r0;
  v[b] = r1;
  if (copy_to) copy_to[a] = cache_value(r0, copy_to), copy_to[b] = cache_value(r1, copy_to);
}

// Two neighbouring values (8 bytes of f32 or 4 of f16) and four (16 bytes or 8) of a cache row.
__device__ __forceinline__ void store_row2(float* p, float2 v) {
  *reinterpret_cast<float2*>(p) = v;
}
__device__ __forceinline__ void store_row2(__half* p, float2 v) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v.x, v.y);
}
__device__ __forceinline__ void store_row4(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
}
__device__ __forceinline__ void store_row4(__half* p, float4 v) {
  store_row2(p, make_float2(v.x, v.y));
  store_row2(p + 2, make_float2(v.z, v.w));
}

// Pairs i and i + 1 (i even, half even, v 16-byte aligned for style 0, 8-byte for style 1)
// rotated by (c.x, c.y) and (c.z, c.w): one 16-byte access (interleaved) or two 8-byte ones
// (halves) instead of four scalar ones. copy_to as above.
template <class Row = float>
__device__ __forceinline__ void rope_rotate_two_pairs(float* v, int64_t i, int64_t half, int style,
                                                      float4 c, Row* copy_to = nullptr) {
  float4 r;
  if (style == 0) {
    const float4 x = *reinterpret_cast<const float4*>(v + 2 * i);
    r = make_float4(x.x * c.x - x.y * c.y, x.x * c.y + x.y * c.x, x.z * c.z - x.w * c.w,
                    x.z * c.w + x.w * c.z);
    *reinterpret_cast<float4*>(v + 2 * i) = r;
    if (copy_to) store_row4(copy_to + 2 * i, r);
    return;
  }
  const float2 a = *reinterpret_cast<const float2*>(v + i);
  const float2 b = *reinterpret_cast<const float2*>(v + i + half);
  const float2 ra = make_float2(a.x * c.x - b.x * c.y, a.y * c.z - b.y * c.w);
  const float2 rb = make_float2(a.x * c.y + b.x * c.x, a.y * c.w + b.y * c.z);
  *reinterpret_cast<float2*>(v + i) = ra;
  *reinterpret_cast<float2*>(v + i + half) = rb;
  if (copy_to) {
    store_row2(copy_to + i, ra);
    store_row2(copy_to + i + half, rb);
  }
}

}  // namespace hearth::cuda
