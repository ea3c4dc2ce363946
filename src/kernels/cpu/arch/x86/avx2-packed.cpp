// The AVX2 table's packed layouts (avx2-packed.inc) on AVX2's integer products: `vpmaddubsw`
// (u8 x s8 pairs to int16) and `vpmaddwd` (int16 pairs to int32), then an add.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx2 {

namespace {

// Per row (lane), sum over the block's 32 columns of code x activation code: vector k's lane
// holds columns 4k .. 4k + 3 (as nibble_vectors), a the token's 32 activation bytes. The
// byte products add up in int16, all eight when codes stay below 16 (8 x 2 x 15 x 127), four at a
// time when they reach 31 (kWideCodes: Q5_K's codes, MXFP4's value + 12).
template <bool kWideCodes>
inline __m256i byte_dot(const __m256i (&c)[8], const int8_t* a) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i p16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int k = 0; k < 8; ++k) {
    int32_t four;
    std::memcpy(&four, a + 4 * k, 4);
    __m256i& p = p16[kWideCodes ? k / 4 : 0];
    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(c[k], _mm256_set1_epi32(four)));
  }
  __m256i q32 = _mm256_madd_epi16(p16[0], ones);
  if constexpr (kWideCodes) q32 = _mm256_add_epi32(q32, _mm256_madd_epi16(p16[1], ones));
  return q32;
}

// acc + the int16 pair products of w and a, per 32-bit lane.
inline __m256i dot_i16_pairs(__m256i acc, __m256i w, __m256i a) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(w, a));
}
// One: the products are independent of the sum, whose add takes a cycle.
constexpr int i16_chains(int) {
  return 1;
}

}  // namespace

#include "kernels/cpu/arch/x86/avx2-packed.inc"

}  // namespace hearth::kernels::avx2
