// fp16 tensor-core pieces shared by the batched matmul's two fp16 forms (matmul-batch.cu's
// staged kernel, matmul-batch-half.cu's streamed one): half2 <-> register bits, 4-bit weights as
// exact halves, the m16n8k16 MMA with f32 accumulators, and the order of x's halves that the
// producers writing that x (rmsnorm, swiglu) and launch_batch_x_half share.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace hearth::cuda {

__device__ __forceinline__ __half2 h2_bits(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, 4);
  return h;
}
__device__ __forceinline__ uint32_t bits_h2(__half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
// Two nibbles (bits 0..3 and 16..19 of v) as the halves 1024 + n: exact small integers.
__device__ __forceinline__ __half2 nibbles_h2(uint32_t v) {
  return h2_bits((v & 0x000F000Fu) | 0x64006400u);
}

// Where element i of a row goes in the batched matmul's fp16 x (launch_batch_x_half): of every
// 4, the middle two swapped, so a block's group of 4 is one MMA B fragment (4i, 4i+2 | 4i+1,
// 4i+3).
__host__ __device__ __forceinline__ int64_t batch_half_index(int64_t i) {
  return (i & ~int64_t(3)) | ((i & 1) << 1) | ((i >> 1) & 1);
}

// Two floats as fp16 pairs whose sum carries ~22 bits: hi = fp16(a, b); lo = fp16(a - hi, b - hi),
// so an MMA over hi and one over lo add up to an fp32-accurate product (inputs |x| < 65504).
__device__ __forceinline__ void split_half2(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 back = __half22float2(h);
  const __half2 l = __floats2half2_rn(a - back.x, b - back.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// c += a . b on fp16 tensor cores, f32 accumulators (m16n8k16). Lane (g, t): a0 / a1 hold rows
// g / g + 8 at k 2t, 2t+1, a2 / a3 the same at k 2t+8, 2t+9; b0 / b1 column g at those k; c[0],
// c[1] row g at columns 2t, 2t+1, c[2], c[3] row g + 8.
__device__ __forceinline__ void mma_f16(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1, float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices from shared memory; lane l gives the address of row l % 8 of matrix
// l / 8. Plain: lane (g, c) gets row g, columns 2c, 2c+1 of each; trans: rows 2c, 2c+1 of
// column g (a B fragment from a row-major [k][n] tile).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const unsigned a = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned a = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

}  // namespace hearth::cuda
