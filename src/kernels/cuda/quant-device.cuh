// Device-side decoding of every weight dtype from the packed layout (cuda-ops.h DeviceWeight):
// dq8<T>() turns 8 consecutive elements (group g of a row) into floats in registers. New dtype =
// one layout row in dequantize.cu + one dq8 specialization here; GEMV, GEMM and embed reuse it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cuda-ops.h"

namespace hearth::cuda {

__device__ __forceinline__ float half_bits(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xffffu)));
}

// Bytes of a little-endian pair of words, b = byte index 0..7.
__device__ __forceinline__ uint32_t byte_of(uint2 v, int b) {
  return ((b < 4 ? v.x : v.y) >> (8 * (b & 3))) & 0xffu;
}

// Q4_K/Q5_K 6-bit (scale, min) of sub-block j from the 12 packed bytes (ggml's get_scale_min_k4).
__device__ __forceinline__ void k4_scale_min(const uint8_t* q, int j, float& sc, float& m) {
  if (j < 4) {
    sc = float(q[j] & 63);
    m = float(q[j + 4] & 63);
  } else {
    sc = float((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = float((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The same from the 16-byte head held in registers (words 1..3 are bytes 4..15): shifts only,
// where indexing a byte array by a run-time j would put the head in local memory.
__device__ __forceinline__ void k_scale_min(const uint4& h, int j, float& sc, float& m) {
  const int sh = 8 * (j & 3);
  const uint32_t a = h.y >> sh, b = h.z >> sh, c = h.w >> sh;
  if (j < 4) {
    sc = float(a & 63);
    m = float(b & 63);
  } else {
    sc = float((c & 0xF) | (((a >> 6) & 3) << 4));
    m = float(((c >> 4) & 0xF) | (((b >> 6) & 3) << 4));
  }
}

template <DType T>
__device__ __forceinline__ void dq8(const DeviceWeight& w, int64_t row, int64_t g, float (&o)[8]);

template <>
__device__ __forceinline__ void dq8<DType::F32>(const DeviceWeight& w, int64_t row, int64_t g,
                                                float (&o)[8]) {
  const float4* p = reinterpret_cast<const float4*>(w.body) + (row * w.cols + g * 8) / 4;
  const float4 a = __ldg(p), b = __ldg(p + 1);
  o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}

template <>
__device__ __forceinline__ void dq8<DType::F16>(const DeviceWeight& w, int64_t row, int64_t g,
                                                float (&o)[8]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(w.body) + (row * w.cols + g * 8) / 8);
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[2 * i] = half_bits(u[i]);
    o[2 * i + 1] = half_bits(u[i] >> 16);
  }
}

template <>
__device__ __forceinline__ void dq8<DType::BF16>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(w.body) + (row * w.cols + g * 8) / 8);
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    o[2 * i] = __uint_as_float(u[i] << 16);
    o[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

// 32-element blocks: group s (0..3) of block b. For the 4-bit types group s covers elements
// 8s..8s+7, held in the low (s<2) or high (s>=2) nibbles of qs[(s&1)*8 ..+8].
template <>
__device__ __forceinline__ void dq8<DType::Q8_0>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const int64_t bi = row * w.blocks_per_row + (g >> 2);
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.body + bi * 32) + (g & 3));
  const float d = half_bits(__ldg(w.aux16 + bi));
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = d * float(int8_t(byte_of(q, i)));
}

template <>
__device__ __forceinline__ void dq8<DType::Q4_0>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const int64_t bi = row * w.blocks_per_row + (g >> 2);
  const int s = int(g & 3);
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.body + bi * 16) + (s & 1));
  const float d = half_bits(__ldg(w.aux16 + bi));
  const int shift = (s >> 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = d * float(int((byte_of(q, i) >> shift) & 0xF) - 8);
}

template <>
__device__ __forceinline__ void dq8<DType::Q4_1>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const int64_t bi = row * w.blocks_per_row + (g >> 2);
  const int s = int(g & 3);
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.body + bi * 16) + (s & 1));
  const uint32_t dm = __ldg(w.aux0 + bi);
  const float d = half_bits(dm), m = half_bits(dm >> 16);
  const int shift = (s >> 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = d * float((byte_of(q, i) >> shift) & 0xF) + m;
}

template <>
__device__ __forceinline__ void dq8<DType::Q5_0>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const int64_t bi = row * w.blocks_per_row + (g >> 2);
  const int s = int(g & 3);
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.body + bi * 16) + (s & 1));
  const uint32_t qh = __ldg(w.aux0 + bi) >> (8 * s);  // element e's 5th bit is qh bit e
  const float d = half_bits(__ldg(w.aux16 + bi));
  const int shift = (s >> 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    o[i] = d * float(int(((byte_of(q, i) >> shift) & 0xF) | (((qh >> i) & 1) << 4)) - 16);
}

template <>
__device__ __forceinline__ void dq8<DType::Q5_1>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const int64_t bi = row * w.blocks_per_row + (g >> 2);
  const int s = int(g & 3);
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.body + bi * 16) + (s & 1));
  const uint32_t qh = __ldg(w.aux0 + bi) >> (8 * s);
  const uint32_t dm = __ldg(w.aux1 + bi);
  const float d = half_bits(dm), m = half_bits(dm >> 16);
  const int shift = (s >> 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    o[i] = d * float(((byte_of(q, i) >> shift) & 0xF) | (((qh >> i) & 1) << 4)) + m;
}

// 256-element super-blocks: group w (0..31) covers elements 8w..8w+7 of super-block b.
template <>
__device__ __forceinline__ void dq8<DType::Q4_K>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const int64_t bi = row * w.blocks_per_row + (g >> 5);
  const int gw = int(g & 31), c = gw >> 3, hi = (gw >> 2) & 1;
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.body + bi * 128 + c * 32) + (gw & 3));
  const uint4 head = __ldg(w.aux_head + bi);
  float sc, mn;
  k_scale_min(head, 2 * c + hi, sc, mn);
  const float d = half_bits(head.x) * sc, m = half_bits(head.x >> 16) * mn;
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = d * float((byte_of(q, i) >> (4 * hi)) & 0xF) - m;
}

template <>
__device__ __forceinline__ void dq8<DType::Q5_K>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const uint8_t* blk = w.body + (row * w.blocks_per_row + (g >> 5)) * 176;
  const int gw = int(g & 31), c = gw >> 3, hi = (gw >> 2) & 1;
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(blk + 48 + c * 32) + (gw & 3));
  const uint2 h = __ldg(reinterpret_cast<const uint2*>(blk + 16) + (gw & 3));
  const uint32_t dm = __ldg(reinterpret_cast<const uint32_t*>(blk));
  float sc, mn;
  k4_scale_min(blk + 4, 2 * c + hi, sc, mn);
  const float d = half_bits(dm) * sc, m = half_bits(dm >> 16) * mn;
  const int hbit = 2 * c + hi;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t v = ((byte_of(q, i) >> (4 * hi)) & 0xF) | (((byte_of(h, i) >> hbit) & 1) << 4);
    o[i] = d * float(v) - m;
  }
}

template <>
__device__ __forceinline__ void dq8<DType::Q6_K>(const DeviceWeight& w, int64_t row, int64_t g,
                                                 float (&o)[8]) {
  const int64_t bi = row * w.blocks_per_row + (g >> 5);
  const uint8_t* blk = w.body + bi * 208;
  const int gw = int(g & 31), half = gw >> 4, k = (gw >> 2) & 3, l0 = (gw & 3) * 8;
  const uint2 ql = __ldg(reinterpret_cast<const uint2*>(blk + half * 64 + (k & 1) * 32 + l0));
  const uint2 qh = __ldg(reinterpret_cast<const uint2*>(blk + 128 + half * 32 + l0));
  const float d =
      half_bits(__ldg(w.aux16 + bi)) * float(int8_t(blk[192 + half * 8 + (l0 >> 4) + 2 * k]));
  const int lshift = (k >> 1) * 4, hshift = 2 * k;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int v = int(((byte_of(ql, i) >> lshift) & 0xF) | (((byte_of(qh, i) >> hshift) & 3) << 4));
    o[i] = d * float(v - 32);
  }
}

// MXFP4 (quant-blocks.h BlockMxfp4): Q4_0's nibble order; code c is the E2M1 value times two
// (kMxfp4Values: magnitudes 0, 1, 2, 3, 4, 6, 8, 12, bit 3 the sign) and the block scale is
// 2^(e - 128) (e in aux16), built from its bits as the reference's mxfp4_scale: every product is
// exact, so the dequantized values match the reference bit for bit.
__device__ __forceinline__ float mxfp4_scale_bits(uint32_t e) {
  return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}
// In integers, so the negative zero code (0b1000) is +0 as in the reference's table.
__device__ __forceinline__ float mxfp4_code(uint32_t c) {
  const uint32_t m = c & 7;
  const int mag = int(m < 4 ? m : (4u + 2u * (m & 1)) << ((m - 4) >> 1));
  return float(c & 8 ? -mag : mag);
}

template <>
__device__ __forceinline__ void dq8<DType::MXFP4>(const DeviceWeight& w, int64_t row, int64_t g,
                                                  float (&o)[8]) {
  const int64_t bi = row * w.blocks_per_row + (g >> 2);
  const int s = int(g & 3);
  const uint2 q = __ldg(reinterpret_cast<const uint2*>(w.body + bi * 16) + (s & 1));
  const float d = mxfp4_scale_bits(__ldg(w.aux16 + bi));
  const int shift = (s >> 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = mxfp4_code((byte_of(q, i) >> shift) & 0xF) * d;
}

}  // namespace hearth::cuda
