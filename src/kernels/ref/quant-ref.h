// Scalar reference kernels (the truth every SIMD kernel is tested against): quantize,
// dequantize and weight-row x activation-row dot products per block type.
// Adding a type: declare its three functions here and add them to ref/ref-table.cpp.
#pragma once

#include <cmath>
#include <cstdint>

namespace hearth::kernels::ref {

// Quantize n floats (multiple of the block size) into blocks; ggml's reference algorithms.
void quantize_q4_0(const float* x, void* y, int64_t n);
void quantize_q4_1(const float* x, void* y, int64_t n);
void quantize_q5_0(const float* x, void* y, int64_t n);
void quantize_q5_1(const float* x, void* y, int64_t n);
void quantize_q8_0(const float* x, void* y, int64_t n);
void quantize_q8_1(const float* x, void* y, int64_t n);
void quantize_q4_k(const float* x, void* y, int64_t n);
void quantize_q5_k(const float* x, void* y, int64_t n);
void quantize_q6_k(const float* x, void* y, int64_t n);
void quantize_q8_k(const float* x, void* y, int64_t n);
void quantize_f16(const float* x, void* y, int64_t n);
void quantize_bf16(const float* x, void* y, int64_t n);
// MXFP4: per block e = floor(log2(amax)) - 2 + 127 (the OCP rule: amax lands in E2M1's top
// binade), each value to the nearest code (ties to the smaller magnitude), saturating at 6.
void quantize_mxfp4(const float* x, void* y, int64_t n);

// Activations for int16 dot products (the AVX-512 Q8_0 and Q6_K packed GEMMs): per 32-element
// block an f32 scale d = amax / max_code and codes q = x / d rounded to nearest, ties to even
// (NaN -> 0). 256x finer than Q8_0 codes: Q8_0 and Q6_K weights keep their accuracy (8-bit
// activations doubled the goldens' KL), while the products run on integer units. x ~ q * d.
// Q6_K's layout takes max_code 32639 (127 x 257), so a code splits into two signed bytes.
void quantize_i16_blocks(const float* x, int16_t* q, float* d, int64_t n, int32_t max_code = 32767);

// Blocks -> n floats.
void dequantize_q4_0(const void* x, float* y, int64_t n);
void dequantize_q4_1(const void* x, float* y, int64_t n);
void dequantize_q5_0(const void* x, float* y, int64_t n);
void dequantize_q5_1(const void* x, float* y, int64_t n);
void dequantize_q8_0(const void* x, float* y, int64_t n);
void dequantize_q8_1(const void* x, float* y, int64_t n);
void dequantize_q3_k(const void* x, float* y, int64_t n);
void dequantize_q4_k(const void* x, float* y, int64_t n);
void dequantize_q5_k(const void* x, float* y, int64_t n);
void dequantize_q6_k(const void* x, float* y, int64_t n);
void dequantize_q8_k(const void* x, float* y, int64_t n);
void dequantize_f32(const void* x, float* y, int64_t n);
void dequantize_f16(const void* x, float* y, int64_t n);
void dequantize_bf16(const void* x, float* y, int64_t n);
void dequantize_mxfp4(const void* x, float* y, int64_t n);

// dot(w row of n, activation row of n) where the activation is in the weight's vec-dot type
// (Q8_0 for Q4_0/Q5_0, Q8_1 for Q4_1/Q5_1, Q8_K for Q4_K/Q5_K, F32 for float weights). Q8_0 and
// Q6_K weights take f32 activations through their dequantizer (kernel-table.h
// dot_via_dequantize), so they have no dot here.
float dot_q4_0(int64_t n, const void* w, const void* x);
float dot_q4_1(int64_t n, const void* w, const void* x);
float dot_q5_0(int64_t n, const void* w, const void* x);
float dot_q5_1(int64_t n, const void* w, const void* x);
float dot_q4_k(int64_t n, const void* w, const void* x);
float dot_q5_k(int64_t n, const void* w, const void* x);
float dot_f32(int64_t n, const void* w, const void* x);
float dot_f16(int64_t n, const void* w, const void* x);
float dot_bf16(int64_t n, const void* w, const void* x);
// MXFP4 weights x Q8_0 activations (as ggml: the codes are int8, the product per block exact).
float dot_mxfp4(int64_t n, const void* w, const void* x);

// Largest |x[j]| of n values, and the signed value that has it (the first one on ties): the
// scale every symmetric quantizer starts from.
inline void signed_absmax(const float* x, int n, float* amax, float* max) {
  *amax = 0.0f;
  *max = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > *amax) {
      *amax = ax;
      *max = x[j];
    }
  }
}

// ggml's round-half-to-even float -> int for |v| < 2^22 (the K-quant searches depend on it).
inline int nearest_int(float v) {
  if (!(v > -4194303.f && v < 4194303.f)) return v > 0 ? 4194303 : -4194303;
  float shifted = v + 12582912.f;
  uint32_t bits;
  __builtin_memcpy(&bits, &shifted, 4);
  return int(bits & 0x007fffff) - 0x00400000;
}

}  // namespace hearth::kernels::ref
