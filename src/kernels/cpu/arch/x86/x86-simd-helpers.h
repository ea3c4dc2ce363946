// Small AVX2/F16C helpers the x86 kernel files share (avx2.cpp, avx2-kv-rows.cpp, avx512.cpp).
// Each is inline in an unnamed namespace on purpose: every ISA file gets its own copy compiled
// with its own flags. One shared inline symbol would let the linker keep the AVX-512 build of it
// for the AVX2 path, which would then fault on a CPU without AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>

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

}  // namespace
}  // namespace hearth::kernels::x86
