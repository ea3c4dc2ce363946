// Small AVX2/F16C helpers the x86 kernel files share (avx2.cpp, avx2-ops.cpp, avx512.cpp).
// Each is inline in an unnamed namespace on purpose: every ISA file gets its own copy compiled
// with its own flags. One shared inline symbol would let the linker keep the AVX-512 build of it
// for the AVX2 path, which would then fault on a CPU without AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/quant-blocks.h"

namespace hearth::kernels::x86 {
namespace {

inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high (16..31).
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0xF));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0xF));
  return _mm256_set_m128i(hi, lo);
}

// Q6_K block b's 256 values as 8 x 32 int8 (q - 32) in value order: ql's low nibbles then high
// nibbles, each with two of qh's bits (ref/quantize-kquants.cpp has the interleave).
inline void q6_k_values(const BlockQ6_K& b, __m256i (&v)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load256(b.ql + 64 * h), ql1 = load256(b.ql + 64 * h + 32);
    const __m256i qh = load256(b.qh + 32 * h);
    auto high = [&](int shift) {
      return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), m2), 4);
    };
    v[4 * h + 0] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql0, m4), high(0)), off);
    v[4 * h + 1] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(ql1, m4), high(2)), off);
    v[4 * h + 2] = _mm256_sub_epi8(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), high(4)), off);
    v[4 * h + 3] = _mm256_sub_epi8(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), high(6)), off);
  }
}

// A Q6_K block for the register-dequantizing dots: its values (q6_k_values) and its 16 group
// scales fl(d * scales[g]), left in memory so each group's scale is broadcast by a load (without
// the empty asm the compiler permutes a register, on the shuffle port the widening saturates).
inline void q6_k_block(const BlockQ6_K& b, float (&scale)[16], __m256i (&v)[8]) {
  const __m256 d = _mm256_set1_ps(h2f(b.d));
  for (int h = 0; h < 2; ++h)  // (vector: 16 scalar conversions a block cost AVX-512 ~10%)
    _mm256_storeu_ps(scale + 8 * h,
                     _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                          reinterpret_cast<const __m128i*>(b.scales + 8 * h))))));
  asm volatile("" : : "m"(scale) : "memory");
  q6_k_values(b, v);
}

}  // namespace
}  // namespace hearth::kernels::x86
