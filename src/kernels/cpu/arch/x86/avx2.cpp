// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; only called when cpuid has them).
// Integer block dots use maddubs (u8 x s8 -> s16 pairs) then madd -> s32, one f32 FMA per block.
#include <immintrin.h>

#include <cstring>

#include "base/half.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/cpu/arch/x86/x86-simd-helpers.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx2 {

namespace {

using x86::h2f;
using x86::hsum;
using x86::load256;
using x86::unpack_nibbles;

// Bit i of the 32-bit word at p -> byte i = 0x10 if set, else 0 (the Q5 fifth bit).
inline __m256i fifth_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i mask = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Unsigned x signed bytes -> 8 s32 sums (the u8 side at most 63, so s16 pairs cannot saturate).
inline __m256i dot_u8(__m256i x, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

// An MXFP4 block's 32 codes -> their int8 values (kMxfp4Values, looked up in both lanes).
inline __m256i mxfp4_values(const uint8_t* qs) {
  const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  return _mm256_shuffle_epi8(_mm256_set_m128i(lut, lut), unpack_nibbles(qs));
}

// Symmetric 32-element blocks (Q4_0, Q5_0, MXFP4) against Q8_0 activations, NT tokens of one
// row: Codes::values(block) gives the 32 signed weight codes, Codes::scale(block) the weight's
// scale; each block's codes are unpacked once for the tile, then one integer dot and one FMA a
// token (|w| against x with w's signs: vpmaddubsw needs an unsigned operand). A prompt's row is
// unpacked once per tile, not once per token.
template <class Codes, int NT>
void symmetric_tile(int64_t n, const typename Codes::Block* w, const uint8_t* x, uint64_t x_stride,
                    float* y, int64_t y_stride) {
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const __m256i v = Codes::values(w[i]);
    const __m256i av = _mm256_sign_epi8(v, v);
    const float ws = Codes::scale(w[i]);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_0& xb = reinterpret_cast<const BlockQ8_0*>(x + uint64_t(t) * x_stride)[i];
      const __m256i sy = _mm256_sign_epi8(load256(xb.qs), v);
      const __m256 p =
          _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(av, sy), _mm256_set1_epi16(1)));
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(ws * h2f(xb.d)), p, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) y[t * y_stride] = hsum(acc[t]);
}

template <class Codes>
float dot_symmetric(int64_t n, const void* w, const void* x) {
  float y;
  symmetric_tile<Codes, 1>(n, static_cast<const typename Codes::Block*>(w),
                           static_cast<const uint8_t*>(x), 0, &y, 1);
  return y;
}

// Tiles of up to 4 tokens (4 accumulators next to the block's codes: 16 registers suffice).
template <class Codes>
void dot_symmetric_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,
                         float* y, int64_t y_stride) {
  using Block = typename Codes::Block;
  dot_token_tiles<Block, TokenTileFn<Block>, symmetric_tile<Codes, 1>, symmetric_tile<Codes, 2>,
                  symmetric_tile<Codes, 3>, symmetric_tile<Codes, 4>>(n, w, x, x_stride, n_tok, y,
                                                                      y_stride);
}

// Blocks with a min (Q4_1, Q5_1) against Q8_1 activations: the unsigned codes' dot, plus the
// min term m * s, where the activation block's s is d * sum(q).
template <class Block, class Values>
float dot_with_min(int64_t n, const void* wv, const void* xv, Values values) {
  const auto* w = static_cast<const Block*>(wv);
  const auto* x = static_cast<const BlockQ8_1*>(xv);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const __m256 p = _mm256_cvtepi32_ps(dot_u8(values(w[i]), load256(x[i].qs)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[i].d) * h2f(x[i].d)), p, acc);
    mins += h2f(w[i].m) * h2f(x[i].s);
  }
  return hsum(acc) + mins;
}

// 32 int8 codes times one scale -> 32 floats at y.
inline void store_scaled(__m256i q, __m256 d, float* y) {
  for (int k = 0; k < 4; ++k) {
    const __m128i b = k < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
    const __m128i part = (k & 1) ? _mm_srli_si128(b, 8) : b;
    _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)), d));
  }
}

}  // namespace

namespace {

struct Mxfp4Codes {
  using Block = BlockMxfp4;
  static __m256i values(const Block& b) { return mxfp4_values(b.qs); }
  static float scale(const Block& b) { return mxfp4_scale(b.e); }
};
struct Q4_0Codes {
  using Block = BlockQ4_0;
  static __m256i values(const Block& b) {
    return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8));
  }
  static float scale(const Block& b) { return h2f(b.d); }
};
struct Q5_0Codes {
  using Block = BlockQ5_0;
  static __m256i values(const Block& b) {
    const __m256i q = _mm256_or_si256(unpack_nibbles(b.qs), fifth_bits(b.qh));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
  }
  static float scale(const Block& b) { return h2f(b.d); }
};

}  // namespace

float dot_mxfp4(int64_t n, const void* wv, const void* xv) {
  return dot_symmetric<Mxfp4Codes>(n, wv, xv);
}
float dot_q4_0(int64_t n, const void* wv, const void* xv) {
  return dot_symmetric<Q4_0Codes>(n, wv, xv);
}
float dot_q5_0(int64_t n, const void* wv, const void* xv) {
  return dot_symmetric<Q5_0Codes>(n, wv, xv);
}
void dot_mxfp4_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,
                     float* y, int64_t y_stride) {
  dot_symmetric_tiles<Mxfp4Codes>(n, w, x, x_stride, n_tok, y, y_stride);
}
void dot_q4_0_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                    int64_t y_stride) {
  dot_symmetric_tiles<Q4_0Codes>(n, w, x, x_stride, n_tok, y, y_stride);
}
void dot_q5_0_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                    int64_t y_stride) {
  dot_symmetric_tiles<Q5_0Codes>(n, w, x, x_stride, n_tok, y, y_stride);
}

float dot_q4_1(int64_t n, const void* wv, const void* xv) {
  return dot_with_min<BlockQ4_1>(n, wv, xv,
                                 [](const BlockQ4_1& b) { return unpack_nibbles(b.qs); });
}

float dot_q5_1(int64_t n, const void* wv, const void* xv) {
  return dot_with_min<BlockQ5_1>(n, wv, xv, [](const BlockQ5_1& b) {
    return _mm256_or_si256(unpack_nibbles(b.qs), fifth_bits(b.qh));
  });
}

void dequantize_mxfp4(const void* src, float* y, int64_t n) {
  const auto* w = static_cast<const BlockMxfp4*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32)
    store_scaled(mxfp4_values(w[i].qs), _mm256_set1_ps(mxfp4_scale(w[i].e)), y);
}

void dequantize_q4_0(const void* src, float* y, int64_t n) {
  const auto* w = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32)
    store_scaled(_mm256_sub_epi8(unpack_nibbles(w[i].qs), _mm256_set1_epi8(8)),
                 _mm256_set1_ps(h2f(w[i].d)), y);
}

void dequantize_q8_0(const void* src, float* y, int64_t n) {
  const auto* w = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const __m256 d = _mm256_set1_ps(h2f(w[i].d));
    for (int k = 0; k < 4; ++k) {
      const __m128i part = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w[i].qs + 8 * k));
      _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)), d));
    }
  }
}

namespace {

// Q4_K and Q5_K against Q8_K, NT tokens of one row: per 64 elements, the low and high nibbles
// of 32 bytes (plus, for Q5_K, bit j of qh[l] as the fifth bit of sub-block j) times their
// sub-block's scale, unpacked once for the tile; the min term sum_j m_j * sum(x_j) per token
// from its bsums (each sub-block of 32 spans two 16-element bsums).
template <class Block, int NT>
void kquant_tile(int64_t n, const Block* w, const uint8_t* x, uint64_t x_stride, float* y,
                 int64_t y_stride) {
  constexpr bool kFifthBit = requires(Block b) {
    b.qh;
  };
  __m256 acc[NT], mins[NT];
  for (int t = 0; t < NT; ++t) acc[t] = mins[t] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i one = _mm256_set1_epi8(1);
  auto block_of = [&](int t, int64_t i) -> const BlockQ8_K& {
    return reinterpret_cast<const BlockQ8_K*>(x + uint64_t(t) * x_stride)[i];
  };
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sc[8], m[8];
    kquant_scales_mins(w[i].scales, sc, m);
    // m_j twice each as 16-bit lanes: one madd against a token's 16 bsums gives the 8 terms
    // m_j (bsum_2j + bsum_2j+1) of its min sum.
    __m128i m8 = _mm_setzero_si128();
    std::memcpy(&m8, m, 8);
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = load256(w[i].qh);
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load256(w[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (kFifthBit) {  // move bit 2c (2c + 1) of each qh byte to bit 4
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
      }
      const __m256i s0 = _mm256_set1_epi16(sc[2 * c]), s1 = _mm256_set1_epi16(sc[2 * c + 1]);
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& xb = block_of(t, i);
        const __m256i p0 = _mm256_maddubs_epi16(lo, load256(xb.qs + 64 * c));
        const __m256i p1 = _mm256_maddubs_epi16(hi, load256(xb.qs + 64 * c + 32));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p0, s0));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p1, s1));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& xb = block_of(t, i);
      const __m256i terms = _mm256_madd_epi16(load256(xb.bsums), m16);
      acc[t] =
          _mm256_fmadd_ps(_mm256_set1_ps(xb.d * h2f(w[i].d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
      mins[t] = _mm256_fmadd_ps(_mm256_set1_ps(xb.d * h2f(w[i].dmin)), _mm256_cvtepi32_ps(terms),
                                mins[t]);
    }
  }
  for (int t = 0; t < NT; ++t) y[t * y_stride] = hsum(acc[t]) - hsum(mins[t]);
}

template <class Block>
float dot_kquant(int64_t n, const void* w, const void* x) {
  float y;
  kquant_tile<Block, 1>(n, static_cast<const Block*>(w), static_cast<const uint8_t*>(x), 0, &y, 1);
  return y;
}

template <class Block>
void dot_kquant_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,
                      float* y, int64_t y_stride) {
  dot_token_tiles<Block, TokenTileFn<Block>, kquant_tile<Block, 1>, kquant_tile<Block, 2>,
                  kquant_tile<Block, 3>, kquant_tile<Block, 4>>(n, w, x, x_stride, n_tok, y,
                                                                y_stride);
}

// Float weights: 8 elements of a row widened to f32, and one element for the tail.
inline __m256 load_f32(const float* p) {
  return _mm256_loadu_ps(p);
}
inline float f32_to_f32(float v) {
  return v;
}
inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_bf16(const uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// sum w[i] * x[i], 16 per step in two accumulators, then 8, then a scalar tail.
template <class T, __m256 (*Load)(const T*), float (*ToF32)(T)>
float dot_wide(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const T*>(wv);
  const float* x = static_cast<const float*>(xv);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(Load(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(Load(w + i), _mm256_loadu_ps(x + i), a0);
  float sum = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) sum += ToF32(w[i]) * x[i];
  return sum;
}

template <__m256 (*Load)(const uint16_t*), float (*ToF32)(uint16_t)>
void dequantize_wide(const void* src, float* y, int64_t n) {
  const auto* w = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Load(w + i));
  for (; i < n; ++i) y[i] = ToF32(w[i]);
}

}  // namespace

float dot_q4_k(int64_t n, const void* w, const void* x) {
  return dot_kquant<BlockQ4_K>(n, w, x);
}

float dot_q5_k(int64_t n, const void* w, const void* x) {
  return dot_kquant<BlockQ5_K>(n, w, x);
}
void dot_q4_k_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                    int64_t y_stride) {
  dot_kquant_tiles<BlockQ4_K>(n, w, x, x_stride, n_tok, y, y_stride);
}
void dot_q5_k_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                    int64_t y_stride) {
  dot_kquant_tiles<BlockQ5_K>(n, w, x, x_stride, n_tok, y, y_stride);
}

float dot_f32(int64_t n, const void* w, const void* x) {
  return dot_wide<float, load_f32, f32_to_f32>(n, w, x);
}

float dot_f16(int64_t n, const void* w, const void* x) {
  return dot_wide<uint16_t, load_f16, fp16_to_f32>(n, w, x);
}

float dot_bf16(int64_t n, const void* w, const void* x) {
  return dot_wide<uint16_t, load_bf16, bf16_to_f32>(n, w, x);
}

void dequantize_f16(const void* src, float* y, int64_t n) {
  dequantize_wide<load_f16, fp16_to_f32>(src, y, n);
}

void dequantize_bf16(const void* src, float* y, int64_t n) {
  dequantize_wide<load_bf16, bf16_to_f32>(src, y, n);
}

namespace {

// As avx512.cpp's q6_k_tile, 8 lanes wide: NT tokens of one Q6_K row, each 16-value group widened,
// converted and scaled once (fl(fl(d * scale) * q), dequantize's rounding) for every token.
template <int NT>
void q6_k_tile(int64_t n, const BlockQ6_K* w, const uint8_t* x, uint64_t x_stride, float* y,
               int64_t y_stride) {
  constexpr int kChains = NT == 1 ? 2 : 1;
  __m256 acc[NT][2 * kChains];
  for (int t = 0; t < NT; ++t)
    for (int c = 0; c < 2 * kChains; ++c) acc[t][c] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const BlockQ6_K& b = w[i];
    alignas(32) float scale[16];
    __m256i v[8];
    x86::q6_k_block(b, scale, v);
    // Unrolled so that g % kChains is a constant (one token: the chains on the stack otherwise,
    // as avx512.cpp's tile).
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      const __m128i q =
          g % 2 == 0 ? _mm256_castsi256_si128(v[g / 2]) : _mm256_extracti128_si256(v[g / 2], 1);
      const __m256 s = _mm256_broadcast_ss(&scale[g]);
      const __m256 w0 = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
      const __m256 w1 =
          _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))));
      const int64_t at = i * kQKK + 16 * g;
      for (int t = 0; t < NT; ++t) {
        const float* xt = reinterpret_cast<const float*>(x + uint64_t(t) * x_stride) + at;
        const int c = 2 * (g % kChains);
        acc[t][c] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt), acc[t][c]);
        acc[t][c + 1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt + 8), acc[t][c + 1]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    __m256 sum = acc[t][0];
    for (int c = 1; c < 2 * kChains; ++c) sum = _mm256_add_ps(sum, acc[t][c]);
    y[t * y_stride] = x86::hsum(sum);
  }
}

// Q8_0 the same way: each 8 values widened from memory, converted and scaled once (fl(d * q)).
template <int NT>
void q8_0_tile(int64_t n, const BlockQ8_0* w, const uint8_t* x, uint64_t x_stride, float* y,
               int64_t y_stride) {
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK32; ++i) {
    const __m256 d = _mm256_set1_ps(x86::h2f(w[i].d));
#pragma GCC unroll 4  // (k % 2 a constant: both chains in registers)
    for (int k = 0; k < 4; ++k) {
      const __m256 wv = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                             reinterpret_cast<const __m128i*>(w[i].qs + 8 * k)))));
      for (int t = 0; t < NT; ++t) {
        const float* xt =
            reinterpret_cast<const float*>(x + uint64_t(t) * x_stride) + i * kQK32 + 8 * k;
        acc[t][k % 2] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xt), acc[t][k % 2]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) y[t * y_stride] = x86::hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
}

}  // namespace

// Tiles of up to 4 tokens (8 accumulators of 8 lanes in registers at once).
void dot_q6_k_f32(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                  int64_t y_stride) {
  dot_token_tiles<BlockQ6_K, TokenTileFn<BlockQ6_K>, q6_k_tile<1>, q6_k_tile<2>, q6_k_tile<3>,
                  q6_k_tile<4>>(n, w, x, x_stride, n_tok, y, y_stride);
}
void dot_q8_0_f32(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                  int64_t y_stride) {
  dot_token_tiles<BlockQ8_0, TokenTileFn<BlockQ8_0>, q8_0_tile<1>, q8_0_tile<2>, q8_0_tile<3>,
                  q8_0_tile<4>>(n, w, x, x_stride, n_tok, y, y_stride);
}

}  // namespace hearth::kernels::avx2
