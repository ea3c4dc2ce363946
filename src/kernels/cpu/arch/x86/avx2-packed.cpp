// The AVX2 table's packed layouts, Q6_K and Q8_0, against int16 activations. Their bytes are
// described above their code; bump a layout's `version` on any byte change.
//
// Why: the AVX2 row kernels (avx2.cpp q6_k_tile, q8_0_tile) take f32 activations and widen every
// 8 codes to floats, two to four shuffles a 16-value group on the one port that runs them: a 1B
// Q6_K decoded at 10.5 tok/s (14% of the roofline) and a 1B Q4_K_M lost ~30% to its Q6_K
// tensors. Here 8 rows sit in the 8 lanes, each lane holding a row's codes for two columns as
// int16 after one widening of 16 bytes; one `vpmaddwd` against the two columns' int16 activation
// codes (broadcast from memory) adds both products for all 8 rows, exact in int32. The codes are
// stored as bytes (Q6_K: q - 32, 1.31x the file's 6.56 bits a weight), so no bit unpacking runs.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx2 {

namespace {

constexpr int kRows = 8;

// x [n] -> int16 codes (in q, 2n bytes) and one f32 scale per 32-block, the bits of
// ref::quantize_i16_blocks (amax / 32767, x / d rounded to nearest even by the instruction, not
// the caller's MXCSR; NaN -> 0). s unused.
void quantize_i16(const float* x, int64_t n, int8_t* q8, float* d, int32_t* s) {
  auto* q = reinterpret_cast<int16_t*>(q8);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / kQK32; ++b, x += kQK32, q += kQK32) {
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      m = _mm256_max_ps(m, _mm256_and_ps(v[k], abs_mask));  // a NaN lane leaves m's value
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float dd = _mm_cvtss_f32(m4) / 32767.f;
    const float id = dd != 0.f ? 1.f / dd : 0.f;
    d[b] = dd;
    s[b] = 0;
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 y = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
      const __m256 r = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      c[k] = _mm256_and_si256(_mm256_cvttps_epi32(r),
                              _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_ORD_Q)));
    }
    // packs interleaves 128-bit halves: [c0 lo, c1 lo, c0 hi, c1 hi] -> element order.
    const __m256i p01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(c[0], c[1]), 0xD8);
    const __m256i p23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(c[2], c[3]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p01);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16), p23);
  }
}

// A 32-column block's 8 code vectors in Q4_0's placement (4 vectors of nibbles at `codes`):
// vector k < 4 the low nibbles of vector k, k >= 4 the high nibbles of vector k - 4.
inline void nibble_vectors(const uint8_t* codes, __m256i (&c)[8]) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int m = 0; m < 4; ++m) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * m));
    c[m] = _mm256_and_si256(v, low);
    c[4 + m] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  }
}

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

// A tile's sums, a lane a row, to y rows t0 .. t0 + NT - 1 (columns: the group's 8 rows).
template <int NT>
inline void store_rows(const __m256 (&acc)[NT], float* y, int64_t t0, int64_t y_stride) {
  for (int t = 0; t < NT; ++t) {
    alignas(32) float lanes[kRows];
    _mm256_store_ps(lanes, acc[t]);
    for (int r = 0; r < kRows; ++r) y[(t0 + t) * y_stride + r] = lanes[r];
  }
}

// Q6_K, 8 rows per group, one row per 32-bit lane. Per super-block (2208 bytes against the
// source's 8 x 210):
//   [8 f32 d, row r at r][16 sub-blocks j x 8 int8 scales, row r's of sub-block j at 8 j + r]
//   [128 column pairs p x 16 bytes: row r's codes q - 32 of columns 2p, 2p + 1 at 2r, 2r + 1]
struct Q6K {
  using Block = BlockQ6_K;
  static constexpr int64_t kCols = kQKK;  // columns a unit
  static constexpr uint64_t kScalesAt = 32, kCodesAt = kScalesAt + 128;
  static constexpr uint64_t kBytes = kCodesAt + 128 * 16;
  static constexpr int kSubs = 16;  // sub-blocks of 16 columns, each with its scales

  static void pack_unit(const BlockQ6_K* const* rows, int64_t i, uint8_t* out) {
    for (int r = 0; r < kRows; ++r) {
      const BlockQ6_K& b = rows[r][i];
      const float d = fp16_to_f32(b.d);
      std::memcpy(out + 4 * r, &d, 4);
      for (int j = 0; j < 16; ++j) out[kScalesAt + 8 * j + r] = uint8_t(b.scales[j]);
      uint8_t c[kQKK];
      q6_k_codes(b, c);
      for (int e = 0; e < kQKK; ++e)
        out[kCodesAt + 16 * uint64_t(e / 2) + 2 * r + e % 2] = uint8_t(int8_t(c[e] - 32));
    }
  }
  // Row r's value at column e of the unit, as ref::dequantize_q6_k rounds it: fl(fl(d sc) q).
  static float value(const uint8_t* in, int r, int e) {
    float d;
    std::memcpy(&d, in + 4 * r, 4);
    const float ds = d * float(int8_t(in[kScalesAt + 8 * (e / 16) + r]));
    return ds * float(int8_t(in[kCodesAt + 16 * (e / 2) + 2 * r + e % 2]));
  }
  // Sub-block j's per-row scale.
  static __m256 sub_scale(const uint8_t* w, int j) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + kScalesAt + 8 * j))));
  }
  static constexpr bool kUnitScale = true;  // the rows' d, once a unit
  static __m256 unit_scale(const uint8_t* w) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w));
  }
  template <int NT>
  static void tile(const uint8_t* w, int64_t units, int64_t n, const PackedActivations& x,
                   int64_t t0, float* y, int64_t y_stride);
};

// Q8_0, 8 rows per group. Per 32-column block (272 bytes, the source's 8 x 34):
//   [8 fp16 d, row r at r][16 column pairs p x 16 bytes: row r's codes of 2p, 2p + 1 at 2r, 2r+1]
struct Q80 {
  using Block = BlockQ8_0;
  static constexpr int64_t kCols = kQK32;
  static constexpr uint64_t kCodesAt = 16;
  static constexpr uint64_t kBytes = kCodesAt + 16 * 16;
  static constexpr int kSubs = 1;

  static void pack_unit(const BlockQ8_0* const* rows, int64_t i, uint8_t* out) {
    for (int r = 0; r < kRows; ++r) {
      const BlockQ8_0& b = rows[r][i];
      std::memcpy(out + 2 * r, &b.d, 2);
      for (int e = 0; e < kQK32; ++e)
        out[kCodesAt + 16 * uint64_t(e / 2) + 2 * r + e % 2] = uint8_t(b.qs[e]);
    }
  }
  static float value(const uint8_t* in, int r, int e) {  // fl(d q), as ref::dequantize_q8_0
    uint16_t h;
    std::memcpy(&h, in + 2 * r, 2);
    return fp16_to_f32(h) * float(int8_t(in[kCodesAt + 16 * (e / 2) + 2 * r + e % 2]));
  }
  static __m256 sub_scale(const uint8_t* w, int) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  }
  static constexpr bool kUnitScale = false;
  static __m256 unit_scale(const uint8_t*) { return _mm256_set1_ps(1.0f); }
  template <int NT>
  static void tile(const uint8_t* w, int64_t units, int64_t n, const PackedActivations& x,
                   int64_t t0, float* y, int64_t y_stride);
};

// x [n] -> Q8_0 activation codes, scales and 8 x each block's code sum, the bits of
// ref::quantize_q8_0 (round half away from zero, clamped to +-127, NaN -> 0, the scale rounded
// through fp16) so packed and unpacked kernels agree.
void quantize_q8_0_sums(const float* x, int64_t n, int8_t* q, float* d, int32_t* s) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(int(0x80000000u)));
  const __m256 half = _mm256_set1_ps(0.5f), lim = _mm256_set1_ps(127.f);
  for (int64_t b = 0; b < n / kQK32; ++b, x += kQK32, q += kQK32) {
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      m = _mm256_max_ps(m, _mm256_and_ps(v[k], abs_mask));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float dd = _mm_cvtss_f32(m4) / 127.f;
    const float id = dd != 0.f ? 1.f / dd : 0.f;
    d[b] = fp16_to_f32(f32_to_fp16(dd));
    __m256i c[4], total = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const __m256 y = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
      // round(y) half away from zero: trunc(y + copysign(0.5, y)) is off for 0.49999997, so
      // truncate and step away where the remainder is at least a half.
      const __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __m256 away =
          _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(y, t), abs_mask), half, _CMP_GE_OQ);
      const __m256 step = _mm256_or_ps(_mm256_and_ps(y, sign_mask), _mm256_set1_ps(1.f));
      __m256 r = _mm256_add_ps(t, _mm256_and_ps(away, step));
      r = _mm256_min_ps(_mm256_max_ps(r, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
      r = _mm256_and_ps(r, _mm256_cmp_ps(y, y, _CMP_ORD_Q));  // NaN -> 0
      c[k] = _mm256_cvtps_epi32(r);
      total = _mm256_add_epi32(total, c[k]);
    }
    const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(c[0], c[1]), 0xD8);
    const __m256i w16b = _mm256_permute4x64_epi64(_mm256_packs_epi32(c[2], c[3]), 0xD8);
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(w16, w16b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), bytes);
    __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4E));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xB1));
    s[b] = 8 * _mm_cvtsi128_si32(t4);
  }
}

// Q4_0 and MXFP4, 8 rows per group. Per 32-column block (Q4_0 144 bytes, the source's 8 x 18;
// MXFP4 136, the source's 8 x 17):
//   [the rows' scales: Q4_0 8 fp16 d, MXFP4 8 E8M0 bytes, row r at r][4 vectors m x 32 bytes:
//   byte 4r + e holds row r's code of column 4m + e in its low nibble and of column 16 + 4m + e
//   in its high nibble]
// A vector's low (high) nibbles are the 4-column codes of 8 rows, one row a 32-bit lane, as
// `vpmaddubsw` wants them (unsigned) against a token's 4 activation bytes broadcast; their int16
// sums add up (Q4_0's codes at most 8 x 2 x 15 x 127 all eight; MXFP4's looked-up E2M1 values
// plus 12, up to 24, four at a time) and `vpmaddwd` makes the block's int32 sum a row. The
// codes' offset (8; MXFP4's 12) comes back from the quantizer's 8 x sum(a).
template <bool kMx>
struct Nibbles {
  using Block = std::conditional_t<kMx, BlockMxfp4, BlockQ4_0>;
  static constexpr int64_t kCols = kQK32;
  static constexpr uint64_t kCodesAt = kMx ? 8 : 16;
  static constexpr uint64_t kBytes = kCodesAt + 4 * 32;
  // MXFP4's nibble -> E2M1 value (doubled, kMxfp4Values) + 12, unsigned for vpmaddubsw.
  alignas(16) static constexpr int8_t kPlus12[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                     12, 11, 10, 9,  8,  6,  4,  0};
  static_assert(kMxfp4Values[5] + 12 == 18 && kMxfp4Values[15] + 12 == 0, "the table, plus 12");

  static void pack_unit(const Block* const* rows, int64_t i, uint8_t* out) {
    std::memset(out + kCodesAt, 0, kBytes - kCodesAt);
    for (int r = 0; r < kRows; ++r) {
      const Block& b = rows[r][i];
      if constexpr (kMx)
        out[r] = b.e;
      else
        std::memcpy(out + 2 * r, &b.d, 2);
      for (int e = 0; e < kQK32; ++e) {
        const int code = e < 16 ? b.qs[e] & 0xF : b.qs[e - 16] >> 4;  // the file's column e
        const int m = (e % 16) / 4, shift = e < 16 ? 0 : 4;
        out[kCodesAt + 32 * m + 4 * r + e % 4] |= uint8_t(code << shift);
      }
    }
  }
  static float value(const uint8_t* in, int r, int e) {  // as the reference dequantizers round
    const int m = (e % 16) / 4;
    const int code = (in[kCodesAt + 32 * m + 4 * r + e % 4] >> (e < 16 ? 0 : 4)) & 0xF;
    if constexpr (kMx) return float(kMxfp4Values[code]) * mxfp4_scale(in[r]);
    uint16_t h;
    std::memcpy(&h, in + 2 * r, 2);
    return float(code - 8) * fp16_to_f32(h);
  }
  // The 8 rows' scales: fp16 d, or E8M0 as mxfp4_scale (2^(e - 128), subnormal below e = 2).
  static __m256 row_scales(const uint8_t* w) {
    if constexpr (kMx) {
      const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w)));
      const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
      const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
      const __m256i below_two = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
      return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, below_two));
    }
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  }

  template <int NT>
  static void tile(const uint8_t* w, int64_t units, int64_t n, const PackedActivations& x,
                   int64_t t0, float* y, int64_t y_stride) {
    const __m256i lut =
        _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kPlus12)));
    const int64_t nb = n / kQK32;
    __m256 acc[NT];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int64_t s = 0; s < units; ++s, w += kBytes) {
      for (uint64_t o = 0; o < kBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w + 4 * kBytes + o), _MM_HINT_T0);
      __m256i c[8];
      nibble_vectors(w + kCodesAt, c);
      if constexpr (kMx)
        for (__m256i& v : c) v = _mm256_shuffle_epi8(lut, v);
      const __m256 dw = row_scales(w);
      for (int t = 0; t < NT; ++t) {
        const __m256i q32 = byte_dot<kMx>(c, act_codes(x, t0 + t, n) + s * kQK32);
        const int32_t xs = act_sums(x, t0 + t, n)[s];  // 8 sum(a)
        const __m256i sum = _mm256_sub_epi32(q32, _mm256_set1_epi32(kMx ? xs / 2 * 3 : xs));
        const __m256 xd = _mm256_broadcast_ss(&x.d[(t0 + t) * nb + s]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, xd), acc[t]);
      }
    }
    store_rows(acc, y, t0, y_stride);
  }
};
using Q40 = Nibbles<false>;
using Mxfp4 = Nibbles<true>;

// Q4_K (and Q5_K), 8 rows per group. Per super-block (Q4_K 1184 bytes against the source's
// 8 x 144, Q5_K 1440 against 8 x 176):
//   [8 fp16 d, row r at r][8 fp16 dmin][8 sub-blocks j x 8 scale bytes, row r's at 8 j + r]
//   [8 sub-blocks j x 8 min bytes][8 sub-blocks j x (128 bytes of codes, as a Q4_0 block's;
//   Q5_K: + 32 bytes H, bit k of byte 4r + e the fifth bit of code vector k's lane r, byte e)]
// A sub-block of 32 columns meets one 32-element activation block: its codes' dot with the
// token's codes comes out of Q4_0's byte products, and the value d sc q - dmin m returns as
// fl(d sc) sum(q a) - fl(dmin m) sum(a), sum(a) from the quantizer's sums. Activations are
// Q8_0's (a scale per 32, finer than the row kernel's Q8_K scale per 256).
template <bool kFive>
struct KQuant {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static constexpr int64_t kCols = kQKK;
  static constexpr uint64_t kScalesAt = 32, kMinsAt = kScalesAt + 64, kCodesAt = kMinsAt + 64;
  static constexpr uint64_t kSubBytes = kFive ? 160 : 128;
  static constexpr uint64_t kBytes = kCodesAt + 8 * kSubBytes;

  // Code vector k (0..7) of a sub-block holds column 4 (k % 4) + e (+ 16 for k >= 4) of row r
  // at lane r, byte e; stored in vector k % 4's low (k < 4) or high nibbles.
  static uint64_t code_at(int r, int c) { return 32 * uint64_t((c % 16) / 4) + 4 * r + c % 4; }
  static int code_vector(int c) { return (c % 16) / 4 + (c < 16 ? 0 : 4); }

  static void pack_unit(const Block* const* rows, int64_t i, uint8_t* out) {
    std::memset(out + kCodesAt, 0, kBytes - kCodesAt);
    for (int r = 0; r < kRows; ++r) {
      const Block& b = rows[r][i];
      std::memcpy(out + 2 * r, &b.d, 2);
      std::memcpy(out + 16 + 2 * r, &b.dmin, 2);
      uint8_t sc[8], m[8];
      kquant_scales_mins(b.scales, sc, m);
      for (int j = 0; j < 8; ++j) {
        out[kScalesAt + 8 * j + r] = sc[j];
        out[kMinsAt + 8 * j + r] = m[j];
      }
      for (int e = 0; e < kQKK; ++e) {
        const int j = e / 32, c = e % 32;  // qs[32 (j / 2) + c], nibble j % 2
        int code = (b.qs[32 * (j / 2) + c] >> (j % 2 ? 4 : 0)) & 0xF;
        if constexpr (kFive) code |= ((b.qh[c] >> j) & 1) << 4;
        uint8_t* sub = out + kCodesAt + kSubBytes * uint64_t(j);
        sub[code_at(r, c)] |= uint8_t((code & 0xF) << (c < 16 ? 0 : 4));
        if constexpr (kFive) sub[128 + 4 * r + c % 4] |= uint8_t((code >> 4) << code_vector(c));
      }
    }
  }
  static float value(const uint8_t* in, int r, int e) {  // fl(fl(d sc) q) - fl(dmin m)
    uint16_t dh, mh;
    std::memcpy(&dh, in + 2 * r, 2);
    std::memcpy(&mh, in + 16 + 2 * r, 2);
    const int j = e / 32, c = e % 32;
    const float d1 = fp16_to_f32(dh) * float(in[kScalesAt + 8 * j + r]);
    const float m1 = fp16_to_f32(mh) * float(in[kMinsAt + 8 * j + r]);
    const uint8_t* sub = in + kCodesAt + kSubBytes * j;
    int code = (sub[code_at(r, c)] >> (c < 16 ? 0 : 4)) & 0xF;
    if constexpr (kFive) code |= ((sub[128 + 4 * r + c % 4] >> code_vector(c)) & 1) << 4;
    return d1 * float(code) - m1;
  }

  template <int NT>
  static void tile(const uint8_t* w, int64_t units, int64_t n, const PackedActivations& x,
                   int64_t t0, float* y, int64_t y_stride) {
    const int64_t nb = n / kQK32;
    __m256 acc[NT];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int64_t s = 0; s < units; ++s, w += kBytes) {
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
      const __m256 dmin =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16)));
      for (int j = 0; j < 8; ++j) {
        const uint8_t* cj = w + kCodesAt + kSubBytes * j;
        for (uint64_t o = 0; o < kSubBytes; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(cj + 2 * kBytes + o), _MM_HINT_T0);
        __m256i c[8];
        nibble_vectors(cj, c);
        if constexpr (kFive) {
          // Bit k of H to bit 4 of code vector k (16-bit shifts: the 0x10 mask keeps only bits
          // that stayed inside their byte).
          const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cj + 128));
          const __m256i bit4 = _mm256_set1_epi8(0x10);
          c[0] = _mm256_or_si256(c[0], _mm256_and_si256(_mm256_slli_epi16(h, 4), bit4));
          c[1] = _mm256_or_si256(c[1], _mm256_and_si256(_mm256_slli_epi16(h, 3), bit4));
          c[2] = _mm256_or_si256(c[2], _mm256_and_si256(_mm256_slli_epi16(h, 2), bit4));
          c[3] = _mm256_or_si256(c[3], _mm256_and_si256(_mm256_slli_epi16(h, 1), bit4));
          c[4] = _mm256_or_si256(c[4], _mm256_and_si256(h, bit4));
          c[5] = _mm256_or_si256(c[5], _mm256_and_si256(_mm256_srli_epi16(h, 1), bit4));
          c[6] = _mm256_or_si256(c[6], _mm256_and_si256(_mm256_srli_epi16(h, 2), bit4));
          c[7] = _mm256_or_si256(c[7], _mm256_and_si256(_mm256_srli_epi16(h, 3), bit4));
        }
        auto bytes8 = [&](uint64_t at) {  // 8 unsigned bytes -> 8 floats
          return _mm256_cvtepi32_ps(
              _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + at))));
        };
        const __m256 dsc = _mm256_mul_ps(d, bytes8(kScalesAt + 8 * j));
        const __m256 dm = _mm256_mul_ps(dmin, bytes8(kMinsAt + 8 * j));
        const int64_t block = s * 8 + j;
        for (int t = 0; t < NT; ++t) {
          const __m256i q32 = byte_dot<kFive>(c, act_codes(x, t0 + t, n) + block * kQK32);
          const __m256 qa = _mm256_cvtepi32_ps(q32);
          const __m256 suma = _mm256_set1_ps(float(act_sums(x, t0 + t, n)[block] / 8));
          const __m256 v = _mm256_fnmadd_ps(dm, suma, _mm256_mul_ps(dsc, qa));
          acc[t] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(&x.d[(t0 + t) * nb + block]), acc[t]);
        }
      }
    }
    store_rows(acc, y, t0, y_stride);
  }
};
using Q4K = KQuant<false>;
using Q5K = KQuant<true>;

template <class L>
bool can_pack(int64_t d, int64_t n) {
  return d % kRows == 0 && n % L::kCols == 0;
}

template <class L>
uint64_t packed_bytes(int64_t d, int64_t n) {
  return uint64_t(d / kRows) * uint64_t(n / L::kCols) * L::kBytes;
}

template <class L, class Block>
void pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  const int64_t units = n / L::kCols;
  const auto* w = static_cast<const Block*>(src);
  for (int64_t g = g0; g < g1; ++g) {
    const Block* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w + (g * kRows + r) * units;
    uint8_t* out = dst + uint64_t(g) * uint64_t(units) * L::kBytes;
    for (int64_t i = 0; i < units; ++i, out += L::kBytes) L::pack_unit(rows, i, out);
  }
}

template <class L>
void unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  const int64_t units = n / L::kCols;
  const uint8_t* in = w + uint64_t(g) * uint64_t(units) * L::kBytes;
  for (int64_t i = 0; i < units; ++i, in += L::kBytes)
    for (int r = 0; r < kRows; ++r)
      for (int e = 0; e < int(L::kCols); ++e) out[r * n + i * L::kCols + e] = L::value(in, r, e);
}

// NT tokens of one row group: per 16 columns and token, 8 `vpmaddwd` into an int32 sum (at most
// 16 x 128 x 32767: exact), then one convert, the rows' scales and the activation block's
// scale; Q6_K's rows' d once a super-block.
template <class L, int NT>
void i16_tile(const uint8_t* w, int64_t units, int64_t n, const PackedActivations& x, int64_t t0,
              float* y, int64_t y_stride) {
  constexpr int kPairs = int(L::kCols) / 2 / L::kSubs;  // column pairs a sub-block
  const int64_t nb = n / kQK32;
  __m256 acc[NT];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t s = 0; s < units; ++s, w += L::kBytes) {
    // The next unit's bytes: the L2 streamer stops at page boundaries.
    for (uint64_t o = 0; o < L::kBytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w + 2 * L::kBytes + o), _MM_HINT_T0);
    __m256 sum[NT];
    for (__m256& v : sum) v = _mm256_setzero_ps();
    for (int j = 0; j < L::kSubs; ++j) {
      __m256i isum[NT];
      for (__m256i& v : isum) v = _mm256_setzero_si256();
      for (int p = 0; p < kPairs; ++p) {
        const __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(
            reinterpret_cast<const __m128i*>(w + L::kCodesAt + 16 * uint64_t(kPairs * j + p))));
        for (int t = 0; t < NT; ++t) {
          const int8_t* a =
              act_codes(x, t0 + t, n) + 2 * (s * L::kCols + 2 * (int64_t(kPairs) * j + p));
          int32_t pair;
          std::memcpy(&pair, a, 4);
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(wv, _mm256_set1_epi32(pair)));
        }
      }
      const __m256 sc = L::sub_scale(w, j);
      for (int t = 0; t < NT; ++t) {
        const int64_t block = (s * L::kCols + int64_t(j) * 2 * kPairs) / kQK32;
        const __m256 xd = _mm256_broadcast_ss(&x.d[(t0 + t) * nb + block]);
        sum[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(isum[t]), sc), xd, sum[t]);
      }
    }
    if constexpr (L::kUnitScale) {
      const __m256 dw = L::unit_scale(w);
      for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(sum[t], dw, acc[t]);
    } else {
      for (int t = 0; t < NT; ++t) acc[t] = _mm256_add_ps(acc[t], sum[t]);
    }
  }
  store_rows(acc, y, t0, y_stride);
}

template <int NT>
void Q6K::tile(const uint8_t* w, int64_t units, int64_t n, const PackedActivations& x, int64_t t0,
               float* y, int64_t y_stride) {
  i16_tile<Q6K, NT>(w, units, n, x, t0, y, y_stride);
}
template <int NT>
void Q80::tile(const uint8_t* w, int64_t units, int64_t n, const PackedActivations& x, int64_t t0,
               float* y, int64_t y_stride) {
  i16_tile<Q80, NT>(w, units, n, x, t0, y, y_stride);
}

// Token tiles of up to 4 (outer, so a tile's activations stay in L1 across the row groups).
template <class L>
void gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x, float* y,
          int64_t y_stride) {
  const int64_t units = n / L::kCols;
  const uint64_t group_bytes = uint64_t(units) * L::kBytes;
  for (int64_t t0 = 0; t0 < x.n_tokens; t0 += 4) {
    const int64_t nt = x.n_tokens - t0 < 4 ? x.n_tokens - t0 : 4;
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* wg = w + uint64_t(g) * group_bytes;
      float* yg = y + g * kRows;
      switch (nt) {
        case 1:
          L::template tile<1>(wg, units, n, x, t0, yg, y_stride);
          break;
        case 2:
          L::template tile<2>(wg, units, n, x, t0, yg, y_stride);
          break;
        case 3:
          L::template tile<3>(wg, units, n, x, t0, yg, y_stride);
          break;
        default:
          L::template tile<4>(wg, units, n, x, t0, yg, y_stride);
          break;
      }
    }
  }
}

// Every layout here: version 1, 8-row groups, its activations by `quantize`.
template <class L>
constexpr PackedLayout layout(DType act, decltype(PackedLayout::quantize) quantize) {
  return {.version = 1,
          .group_rows = kRows,
          .can_pack = can_pack<L>,
          .bytes = packed_bytes<L>,
          .pack = pack<L, typename L::Block>,
          .gemm = gemm<L>,
          .quantize = quantize,
          .act_type = act,
          .unpack_rows = unpack_rows<L>};
}

}  // namespace

const PackedLayout q6_k_packed = layout<Q6K>(DType::I16, quantize_i16);
const PackedLayout q8_0_packed = layout<Q80>(DType::I16, quantize_i16);
const PackedLayout q4_0_packed = layout<Q40>(DType::Q8_0, quantize_q8_0_sums);
const PackedLayout q4_k_packed = layout<Q4K>(DType::Q8_0, quantize_q8_0_sums);
const PackedLayout q5_k_packed = layout<Q5K>(DType::Q8_0, quantize_q8_0_sums);
const PackedLayout mxfp4_packed = layout<Mxfp4>(DType::Q8_0, quantize_q8_0_sums);

}  // namespace hearth::kernels::avx2
