// The batched decode matmul's staged rows (matmul-batch.cu): per weight dtype, what a row's
// stage of 4 blocks is in shared memory and how a lane's int8 fragment (with its scale and min)
// or its fp16 fragment comes out of it. A new dtype is one BT<> specialization here.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cp-async.cuh"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/dequantize.cuh"
#include "kernels/cuda/half-mma.cuh"

namespace hearth::cuda::batch_stage {

// The fp16 fragment of one row's block for the two m16n8k16 MMAs over its 32 elements: lane
// (g, t) holds h[0] = elements (4t, 4t+2), h[1] = (4t+1, 4t+3), h[2], h[3] the same 16 further
// on. MMA 1 takes h[0] in k slots 2t, 2t+1 and h[1] in 2t+8, 2t+9; MMA 2 h[2] and h[3]. x's
// halves are stored in that order (launch_batch_x_half swaps the middle two of every four), so a
// lane's B fragments are one 8-byte read each.
// One 32-element block of one row as an MMA A fragment: lane (g, t) holds the s8 values of k
// positions 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) of row g (or g + 8), which are the block's
// elements 4t.. and 16+4t.. in ggml order; x's B fragment reads the same positions.
struct AFrag {
  uint32_t lo, hi;
  float d, m;  // value = d * q - m (m: Q4_K's min, times x's block sum)
};

template <DType T>
struct BT;

// A row's stage (4 blocks from block b0, b0 % 4 == 0) in shared memory: kBody bytes of quants,
// then its scales (kStride - kBody >= what they need). kStride / 4 words is 4 mod 8, so the 8
// rows a fragment read touches start in different banks.
// Q4_0: 16 body bytes per block, element j in the low nibble of byte j, element j+16 in the high;
// four f16 scales.
template <>
struct BT<DType::Q4_0> {
  static constexpr bool kTwoLevel = false;
  static constexpr bool kMin = false;  // value = d * q - m
  static constexpr int kBody = 64, kStride = 80;
  static __device__ const uint8_t* body(const DeviceWeight& w, int64_t row, int b0) {
    return w.body + (size_t(row) * w.blocks_per_row + b0) * 16;
  }
  static __device__ void stage_aux(uint8_t* dst, const DeviceWeight& w, int64_t row, int b0) {
    cp_async8(dst, w.aux16 + size_t(row) * w.blocks_per_row + b0);
  }
  static __device__ AFrag frag(const uint8_t* s, int u, int t, int) {
    const uint32_t q = *reinterpret_cast<const uint32_t*>(s + u * 16 + 4 * t);
    const uint16_t d = *reinterpret_cast<const uint16_t*>(s + kBody + 2 * u);
    return {__vsub4(q & 0x0F0F0F0Fu, 0x08080808u), __vsub4((q >> 4) & 0x0F0F0F0Fu, 0x08080808u),
            half_bits(d), 0.f};
  }
  static __device__ void frag_h(const uint8_t* s, int u, int t, int, __half2 (&h)[4]) {
    const uint32_t q = *reinterpret_cast<const uint32_t*>(s + u * 16 + 4 * t);
    const uint16_t d = *reinterpret_cast<const uint16_t*>(s + kBody + 2 * u);
    const __half2 dd = h2_bits(uint32_t(d) * 0x10001u), k = __float2half2_rn(1032.f);
    // (1024 + n - 1032) is n - 8 exactly; one rounding, in the multiply.
    h[0] = __hmul2(__hsub2(nibbles_h2(q), k), dd);
    h[1] = __hmul2(__hsub2(nibbles_h2(q >> 8), k), dd);
    h[2] = __hmul2(__hsub2(nibbles_h2(q >> 4), k), dd);
    h[3] = __hmul2(__hsub2(nibbles_h2(q >> 12), k), dd);
  }
};

// Q8_0: 32 body bytes, element j = byte j. Two-level x (as the GEMV: one level doubles the KLD).
template <>
struct BT<DType::Q8_0> {
  static constexpr bool kTwoLevel = true;
  static constexpr bool kMin = false;  // value = d * q - m
  static constexpr int kBody = 128, kStride = 144;
  static __device__ const uint8_t* body(const DeviceWeight& w, int64_t row, int b0) {
    return w.body + (size_t(row) * w.blocks_per_row + b0) * 32;
  }
  static __device__ void stage_aux(uint8_t* dst, const DeviceWeight& w, int64_t row, int b0) {
    cp_async8(dst, w.aux16 + size_t(row) * w.blocks_per_row + b0);
  }
  static __device__ AFrag frag(const uint8_t* s, int u, int t, int) {
    const uint8_t* p = s + u * 32 + 4 * t;
    const uint16_t d = *reinterpret_cast<const uint16_t*>(s + kBody + 2 * u);
    return {*reinterpret_cast<const uint32_t*>(p), *reinterpret_cast<const uint32_t*>(p + 16),
            half_bits(d), 0.f};
  }
  static __device__ void frag_h(const uint8_t* s, int u, int t, int, __half2 (&h)[4]) {
    const uint8_t* p = s + u * 32 + 4 * t;
    const uint16_t d = *reinterpret_cast<const uint16_t*>(s + kBody + 2 * u);
    const __half2 dd = h2_bits(uint32_t(d) * 0x10001u), k = __float2half2_rn(1152.f);
    // Bytes b + 128 (the sign bit flipped) under 0x64: the halves 1152 + b, b exactly after the
    // subtraction.
    const uint32_t lo = *reinterpret_cast<const uint32_t*>(p) ^ 0x80808080u;
    const uint32_t hi = *reinterpret_cast<const uint32_t*>(p + 16) ^ 0x80808080u;
    h[0] = __hmul2(__hsub2(h2_bits(__byte_perm(lo, 0x64u, 0x4240)), k), dd);
    h[1] = __hmul2(__hsub2(h2_bits(__byte_perm(lo, 0x64u, 0x4341)), k), dd);
    h[2] = __hmul2(__hsub2(h2_bits(__byte_perm(hi, 0x64u, 0x4240)), k), dd);
    h[3] = __hmul2(__hsub2(h2_bits(__byte_perm(hi, 0x64u, 0x4341)), k), dd);
  }
};

// Q4_K (packed: 128 quant bytes per super-block, heads apart): block b is sub-block j = b % 8,
// in chunk j / 2 of 32 bytes, low nibbles for even j, high for odd; a stage's 4 blocks are one
// half of a super-block (64 bytes), then its 16-byte head (scales and mins).
template <>
struct BT<DType::Q4_K> {
  static constexpr bool kTwoLevel = false;
  static constexpr bool kMin = true;  // value = d * q - m
  static constexpr int kBody = 64, kStride = 80;
  static __device__ const uint8_t* body(const DeviceWeight& w, int64_t row, int b0) {
    return w.body + (size_t(row) * w.blocks_per_row + (b0 >> 3)) * 128 + (b0 & 7) * 16;
  }
  static __device__ void stage_aux(uint8_t* dst, const DeviceWeight& w, int64_t row, int b0) {
    cp_async16(dst, w.aux_head + size_t(row) * w.blocks_per_row + (b0 >> 3));
  }
  static __device__ AFrag frag(const uint8_t* s, int u, int t, int b0) {
    const int j = (b0 & 7) + u, sh = 4 * (u & 1);
    const uint8_t* p = s + (u >> 1) * 32 + 4 * t;
    const uint4 h = *reinterpret_cast<const uint4*>(s + kBody);
    float sc, mn;
    k_scale_min(h, j, sc, mn);
    return {(*reinterpret_cast<const uint32_t*>(p) >> sh) & 0x0F0F0F0Fu,
            (*reinterpret_cast<const uint32_t*>(p + 16) >> sh) & 0x0F0F0F0Fu, half_bits(h.x) * sc,
            half_bits(h.x >> 16) * mn};
  }
  static __device__ void frag_h(const uint8_t* s, int u, int t, int b0, __half2 (&h)[4]) {
    const int j = (b0 & 7) + u, sh = 4 * (u & 1);
    const uint8_t* p = s + (u >> 1) * 32 + 4 * t;
    const uint4 hd = *reinterpret_cast<const uint4*>(s + kBody);
    float sc, mn;
    k_scale_min(hd, j, sc, mn);
    const __half2 sd = __float2half2_rn(half_bits(hd.x) * sc);
    const __half2 om = __float2half2_rn(-half_bits(hd.x >> 16) * mn);
    const __half2 k = __float2half2_rn(1024.f);
    const uint32_t lo = *reinterpret_cast<const uint32_t*>(p) >> sh;
    const uint32_t hi = *reinterpret_cast<const uint32_t*>(p + 16) >> sh;
    h[0] = __hfma2(__hsub2(nibbles_h2(lo), k), sd, om);
    h[1] = __hfma2(__hsub2(nibbles_h2(lo >> 8), k), sd, om);
    h[2] = __hfma2(__hsub2(nibbles_h2(hi), k), sd, om);
    h[3] = __hfma2(__hsub2(nibbles_h2(hi >> 8), k), sd, om);
  }
};

}  // namespace hearth::cuda::batch_stage
