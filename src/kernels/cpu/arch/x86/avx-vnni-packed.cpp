// The AVX-VNNI table's packed layouts: avx2-packed.inc's kernels and bytes, on the VEX-encoded
// dot-product instructions of Intel's client cores without AVX-512 (Alder Lake and later; a CPU
// with AVX-512 VNNI takes that table first). `vpdpbusd` adds four u8 x s8 products into each int32
// lane in one instruction where AVX2 takes three (`vpmaddubsw`, an add, `vpmaddwd`), and `vpdpwssd`
// two int16 products where AVX2 takes two. Every sum is exact in int32 in both (no int16 step that
// could saturate), so the results are the AVX2 table's bits.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx_vnni {

namespace {

// Per row (lane), sum over the block's 32 columns of code x activation code: vector k's lane
// holds columns 4k .. 4k + 3 (as nibble_vectors), a the token's 32 activation bytes. Two chains,
// so a one-token tile waits on four dependent `vpdpbusd`, not eight. kWideCodes: unused (no
// int16 step to overflow).
template <bool kWideCodes>
inline __m256i byte_dot(const __m256i (&c)[8], const int8_t* a) {
  __m256i q32[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int k = 0; k < 8; ++k) {
    int32_t four;
    std::memcpy(&four, a + 4 * k, 4);
    q32[k % 2] = _mm256_dpbusd_avx_epi32(q32[k % 2], c[k], _mm256_set1_epi32(four));
  }
  return _mm256_add_epi32(q32[0], q32[1]);
}

// acc + the int16 pair products of w and a, per 32-bit lane.
inline __m256i dot_i16_pairs(__m256i acc, __m256i w, __m256i a) {
  return _mm256_dpwssd_avx_epi32(acc, w, a);
}
// Each vpdpwssd waits for its sum (a latency of ~4-5 cycles): with one chain a token, a one- or
// four-token tile ran at its latency, slower than AVX2's vpmaddwd + vpaddd.
constexpr int i16_chains(int tokens) {
  return tokens <= 2 ? 4 : 2;
}

}  // namespace

#include "kernels/cpu/arch/x86/avx2-packed.inc"

}  // namespace hearth::kernels::avx_vnni
