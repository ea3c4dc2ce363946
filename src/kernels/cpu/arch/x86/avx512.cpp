// AVX-512 kernels (F/BW/VL/DQ + VNNI): two 32-element blocks per 512-bit register, int8 dots
// with vpdpbusd. Float weights stay f32 math: bf16/f16 widen exactly, activations are not rounded
// (AVX512-BF16's dpbf16ps would round activations to bf16; decode is bandwidth-bound anyway).
#include <immintrin.h>

#include "base/half.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/cpu/arch/x86/x86-simd-helpers.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx512 {

namespace {

using x86::h2f;
using x86::load256;
using x86::unpack_nibbles;

inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Per-lane block scales: lanes 0..7 get a, lanes 8..15 get b.
inline __m512 two_scales(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

}  // namespace

float dot_q4_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  const int64_t nb = n / kQK32;
  __m512 acc = _mm512_setzero_ps();
  const __m512i eights = _mm512_set1_epi8(8);
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    // q in [0, 15]: sum (q - 8) * y = dpbusd(q, y) - dpbusd(8, y).
    const __m512i q = join(unpack_nibbles(w[i].qs), unpack_nibbles(w[i + 1].qs));
    const __m512i y = join(load256(x[i].qs), load256(x[i + 1].qs));
    const __m512i s = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y),
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, y));
    const __m512 d = two_scales(h2f(w[i].d) * h2f(x[i].d), h2f(w[i + 1].d) * h2f(x[i + 1].d));
    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (i < nb) sum += avx2::dot_q4_0(kQK32, w + i, x + i);
  return sum;
}

float dot_mxfp4(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockMxfp4*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  const int64_t nb = n / kQK32;
  const __m512i lut =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
  const __m512i twelves = _mm512_set1_epi8(12);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    // Values v in [-12, 12]: sum v * y = dpbusd(v + 12, y) - dpbusd(12, y) (dpbusd wants u8).
    const __m512i v =
        _mm512_shuffle_epi8(lut, join(unpack_nibbles(w[i].qs), unpack_nibbles(w[i + 1].qs)));
    const __m512i y = join(load256(x[i].qs), load256(x[i + 1].qs));
    const __m512i s = _mm512_sub_epi32(
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_add_epi8(v, twelves), y),
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), twelves, y));
    const __m512 d =
        two_scales(mxfp4_scale(w[i].e) * h2f(x[i].d), mxfp4_scale(w[i + 1].e) * h2f(x[i + 1].d));
    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (i < nb) sum += avx2::dot_mxfp4(kQK32, w + i, x + i);
  return sum;
}

namespace {

inline __m512 load_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load_bf16(const uint16_t* p) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

// sum w[i] * x[i] with weights widened by Load, 32 per step, masked tail (no scalar loop).
template <class T, __m512 (*Load)(const T*), __m512 (*LoadMasked)(const T*, __mmask16)>
float dot_wide(int64_t n, const T* w, const float* x) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(Load(w + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(Load(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    a0 = _mm512_fmadd_ps(LoadMasked(w + i, m), _mm512_maskz_loadu_ps(m, x + i), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

inline __m512 load_f32(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 load_f32_masked(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
inline __m512 load_f16_masked(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
inline __m512 load_bf16_masked(const uint16_t* p, __mmask16 m) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

}  // namespace

float dot_f32(int64_t n, const void* w, const void* x) {
  return dot_wide<float, load_f32, load_f32_masked>(n, static_cast<const float*>(w),
                                                    static_cast<const float*>(x));
}

float dot_f16(int64_t n, const void* w, const void* x) {
  return dot_wide<uint16_t, load_f16, load_f16_masked>(n, static_cast<const uint16_t*>(w),
                                                       static_cast<const float*>(x));
}

float dot_bf16(int64_t n, const void* w, const void* x) {
  return dot_wide<uint16_t, load_bf16, load_bf16_masked>(n, static_cast<const uint16_t*>(w),
                                                         static_cast<const float*>(x));
}

void dequantize_f16(const void* src, float* y, int64_t n) {
  const auto* w = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, load_f16_masked(w + i, m));
  }
}

// Q8_0 -> f32, 16 lanes at a time; float(q) * d exactly as the reference rounds it.
void dequantize_q8_0(const void* src, float* y, int64_t n) {
  const auto* w = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK32; ++i, y += kQK32) {
    const __m512 d = _mm512_set1_ps(h2f(w[i].d));
    const __m128i* q = reinterpret_cast<const __m128i*>(w[i].qs);
    _mm512_storeu_ps(
        y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d));
    _mm512_storeu_ps(
        y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), d));
  }
}

// Q6_K -> f32: the 6-bit values of each 128-element half are rebuilt 32 at a time from ql/qh
// (layout in quant-blocks.h), then scaled by (d * scale) like the reference, so bits agree.
void dequantize_q6_k(const void* src, float* y, int64_t n) {
  const auto* w = static_cast<const BlockQ6_K*>(src);
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = h2f(w[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const __m256i ql0 = load256(w[i].ql + 64 * h), ql1 = load256(w[i].ql + 64 * h + 32);
      const __m256i qh = load256(w[i].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4),
                          _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4)),
      };
      const int8_t* sc = w[i].scales + 8 * h;
      for (int k = 0; k < 4; ++k) {
        const __m256i v = _mm256_sub_epi8(q[k], off);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
        _mm512_storeu_ps(y + 32 * k, _mm512_mul_ps(_mm512_set1_ps(d * float(sc[2 * k])), lo));
        _mm512_storeu_ps(y + 32 * k + 16,
                         _mm512_mul_ps(_mm512_set1_ps(d * float(sc[2 * k + 1])), hi));
      }
    }
  }
}

namespace {

// NT tokens of one Q6_K row: each 16-value group is widened, converted and scaled once (the same
// fl(fl(d * scale) * q) as dequantize_q6_k) and FMA'd into every token's accumulator. A token has
// kChains accumulators taken in turn, so few tokens still keep several FMAs in flight (one chain
// waits out the FMA's latency every 16 values).
template <int NT>
void q6_k_tile(int64_t n, const BlockQ6_K* w, const uint8_t* x, uint64_t x_stride, float* y,
               int64_t y_stride) {
  constexpr int kChains = NT == 1 ? 4 : NT == 2 ? 2 : 1;
  __m512 acc[NT][kChains];
  for (int t = 0; t < NT; ++t)
    for (int c = 0; c < kChains; ++c) acc[t][c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const BlockQ6_K& b = w[i];
    alignas(64) float scale[16];
    __m256i v[8];
    x86::q6_k_block(b, scale, v);
    // Unrolled so that g % kChains is a constant: where GCC kept the loop (two tokens) the chains
    // lived on the stack, each FMA behind a store and a load (2048 x 2048, one thread: 2 tokens
    // 280 us a token against 206 for one).
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      const __m128i q =
          g % 2 == 0 ? _mm256_castsi256_si128(v[g / 2]) : _mm256_extracti128_si256(v[g / 2], 1);
      const __m512 wv =
          _mm512_mul_ps(_mm512_set1_ps(scale[g]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
      const int64_t at = i * kQKK + 16 * g;
      for (int t = 0; t < NT; ++t) {
        __m512& a = acc[t][g % kChains];
        a = _mm512_fmadd_ps(
            wv, _mm512_loadu_ps(reinterpret_cast<const float*>(x + uint64_t(t) * x_stride) + at),
            a);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    __m512 sum = acc[t][0];
    for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[t][c]);
    y[t * y_stride] = _mm512_reduce_add_ps(sum);
  }
}

}  // namespace

// Tiles of up to 8 tokens (8 accumulators of 16 lanes in registers at once).
void dot_q6_k_f32(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                  int64_t y_stride) {
  dot_token_tiles<BlockQ6_K, TokenTileFn<BlockQ6_K>, q6_k_tile<1>, q6_k_tile<2>, q6_k_tile<3>,
                  q6_k_tile<4>, q6_k_tile<5>, q6_k_tile<6>, q6_k_tile<7>, q6_k_tile<8>>(
      n, w, x, x_stride, n_tok, y, y_stride);
}

}  // namespace hearth::kernels::avx512
