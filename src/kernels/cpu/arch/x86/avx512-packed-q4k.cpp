// AVX-512 packed Q4_K and Q5_K against Q8_K activations (the frame: avx512-packed-frame.h).
// Their bytes are described above their code; bump a layout's `version` on any byte change.
#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "kernels/cpu/arch/x86/avx512-packed-frame.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx512 {

namespace {

using namespace packed;

// x [n] -> Q8_K codes, one scale per 256 elements, rounding exactly like ref::quantize_q8_k
// (its sign too: the scale takes the sign of the first element of largest magnitude), and the
// 32-element sums split for the Q4_K mins (see PackedActivations). Like the row kernel's Q8_K:
// Q4_K weights already carry a 6-bit scale per 32 elements, so one activation scale per 256
// keeps the integer dots of a super-block summable with no float work per sub-block but one FMA.
void quantize_q8_k_split(const float* x, int64_t n, int8_t* q, float* d, int32_t* s) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK, q += kQKK, s += 8) {
    __m512 m = _mm512_setzero_ps();
    // abs(x) first: max_ps returns its second operand for a NaN, so NaNs are skipped like ref.
    for (int k = 0; k < 16; ++k) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)), m);
    const float amax = _mm512_reduce_max_ps(m);
    std::memset(s, 0, 8 * sizeof(int32_t));
    if (!(amax > 0.f)) {
      std::memset(q, 0, kQKK);
      d[i] = 0.f;
      continue;
    }
    float max = amax;
    for (int k = 0; k < 16; ++k) {
      const __m512 v = _mm512_loadu_ps(x + 16 * k);
      const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (at) {
        max = x[16 * k + __builtin_ctz(at)];
        break;
      }
    }
    const float iscale = -127.f / max;
    d[i] = 1.f / iscale;
    uint8_t hi[8], lo[8];
    for (int j = 0; j < 8; ++j) {
      __m512i sum = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512 v =
            _mm512_mul_ps(_mm512_loadu_ps(x + 32 * j + 16 * h), _mm512_set1_ps(iscale));
        const __m512i c = _mm512_min_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(127));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * j + 16 * h), _mm512_cvtsepi32_epi8(c));
        sum = _mm512_add_epi32(sum, c);
      }
      const int32_t total = _mm512_reduce_add_epi32(sum);  // |total| <= 32 * 127: 13 bits
      hi[j] = uint8_t(total >> 7);
      lo[j] = uint8_t(total & 127);
    }
    std::memcpy(s, hi, 8);
    std::memcpy(s + 2, lo, 8);
  }
}

// Q4_K (VNNI int8 dots against Q8_K activations, as the row kernel), 16 rows per group. Per
// 256-element super-block (2304 bytes, the source's size): [16 fp16 d][16 fp16 dmin]
// [3 x 64 bytes of six-bit scales and mins, word r for row r][4 pairs of sub-blocks x 8 x 64
// bytes of nibbles], where 64-byte vector k of pair c holds, for lane r, bytes
// qs[32c + 4k .. 32c + 4k + 3] of row r: low nibbles are elements 4k.. of sub-block 2c, high
// nibbles the same of 2c + 1. The scale words keep the source's 12 bytes a row, arranged so the
// kernel needs one and per min vector: byte b of word 0 is m_b, of word 1 m_{4+b}, of word 2
// sc_b, each in its low 6 bits; their top 2 bits hold sc_{4+b}, 2 bits each (word 0 the lowest).
// Per super-block: y += xd (d sum_j sc_j (q_j . x_j) - dmin sum_j m_j sum(x_j)), both sums exact
// integers as in ref::dot_q4_k.
//
// Q5_K: the same, followed by its fifth bits (2816 bytes a super-block, the source's size):
// [8 x 64 bytes], vector k holding for lane r bytes qh[4k .. 4k + 3] of row r, whose bit 2c is
// the fifth bit of the low nibble of vector k of pair c, and bit 2c + 1 of its high nibble.
constexpr uint64_t kQ4KSuperBytes = 64 + 3 * 64 + 4 * 8 * 64;
constexpr uint64_t kQ4KWords = 64, kQ4KCodes = 256;
constexpr uint64_t kQ5KHighBits = kQ4KSuperBytes, kQ5KSuperBytes = kQ4KSuperBytes + 8 * 64;

template <bool kFive>
constexpr uint64_t super_bytes() {
  return kFive ? kQ5KSuperBytes : kQ4KSuperBytes;
}

bool q4_k_can_pack(int64_t d, int64_t n) {
  return d % kRows == 0 && n % kQKK == 0;
}

template <bool kFive>
uint64_t k_bytes(int64_t d, int64_t n) {
  return uint64_t(d / kRows) * uint64_t(n / kQKK) * super_bytes<kFive>();
}

// Offset of byte b of row r's scale word v (0..2) in a packed super-block.
constexpr uint64_t q4_k_word_byte(int v, int r, int b) {
  return kQ4KWords + uint64_t(v * 64 + r * 4 + b);
}

template <bool kFive>
void k_pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  constexpr uint64_t kSuper = super_bytes<kFive>();
  const int64_t nsb = n / kQKK;
  const auto* w = static_cast<const Block*>(src);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* out = dst + uint64_t(g) * uint64_t(nsb) * kSuper;
    for (int64_t i = 0; i < nsb; ++i, out += kSuper)
      for (int r = 0; r < kRows; ++r) {
        const Block& b = w[(g * kRows + r) * nsb + i];
        if constexpr (kFive)
          for (int k = 0; k < 8; ++k)
            std::memcpy(out + kQ5KHighBits + k * 64 + r * 4, b.qh + 4 * k, 4);
        std::memcpy(out + r * 2, &b.d, 2);
        std::memcpy(out + 32 + r * 2, &b.dmin, 2);
        uint8_t sc[8], m[8];
        kquant_scales_mins(b.scales, sc, m);
        for (int k = 0; k < 4; ++k) {
          const int top = sc[4 + k];
          out[q4_k_word_byte(0, r, k)] = uint8_t(m[k] | (top & 3) << 6);
          out[q4_k_word_byte(1, r, k)] = uint8_t(m[4 + k] | (top >> 2 & 3) << 6);
          out[q4_k_word_byte(2, r, k)] = uint8_t(sc[k] | (top >> 4) << 6);
        }
        for (int c = 0; c < 4; ++c)
          for (int k = 0; k < 8; ++k)
            std::memcpy(out + kQ4KCodes + c * 512 + k * 64 + r * 4, b.qs + 32 * c + 4 * k, 4);
      }
  }
}

template <bool kFive>
void k_unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  constexpr uint64_t kSuper = super_bytes<kFive>();
  const int64_t nsb = n / kQKK;
  const uint8_t* in = w + uint64_t(g) * uint64_t(nsb) * kSuper;
  for (int64_t i = 0; i < nsb; ++i, in += kSuper) {
    for (int r = 0; r < kRows; ++r) {
      uint16_t dh, mh;
      std::memcpy(&dh, in + r * 2, 2);
      std::memcpy(&mh, in + 32 + r * 2, 2);
      const float d = fp16_to_f32(dh), dmin = fp16_to_f32(mh);
      for (int j = 0; j < 8; ++j) {
        const int k = j % 4;
        const int sc = j < 4 ? in[q4_k_word_byte(2, r, k)] & 63
                             : (in[q4_k_word_byte(0, r, k)] >> 6) |
                                   (in[q4_k_word_byte(1, r, k)] >> 6) << 2 |
                                   (in[q4_k_word_byte(2, r, k)] >> 6) << 4;
        const int m = in[q4_k_word_byte(j / 4, r, k)] & 63;
        const float dj = d * float(sc), mj = dmin * float(m);
        float* o = out + r * n + i * kQKK + j * 32;
        const int c = j / 2, shift = (j & 1) * 4;
        for (int kk = 0; kk < 8; ++kk)
          for (int e = 0; e < 4; ++e) {
            int code = (in[kQ4KCodes + c * 512 + kk * 64 + r * 4 + e] >> shift) & 0xF;
            if constexpr (kFive) code |= (in[kQ5KHighBits + kk * 64 + r * 4 + e] >> j & 1) << 4;
            o[4 * kk + e] = dj * float(code) - mj;
          }
      }
    }
  }
}

// Units are super-blocks (kQ4KSuperBytes). As in Q4_0, the high nibbles stay in place (16 q):
// their sub-block's scale takes the 1/16, a power of two, so each product and the super-block's
// sum are the integers ref::dot_q4_k forms. Per sub-block: 8 and + 8 dot products and, per
// token, one convert and one FMA; the mins are 4 byte dot products per super-block.
// Against the previous loop (Q8_0 activations, both scale products per sub-block: ~33 uops a
// sub-block against ~23 here): see docs/performance.md, session 14.
// Q5_K: the low nibbles take their fifth bit as bit 4, the high ones are shifted down first
// (a fifth bit above a nibble left in place would not fit the byte), so no 1/16.
template <bool kFive, int NT, int G>
void k_streams(const uint8_t* w, uint64_t stride_bytes, int64_t stride_units, int64_t first,
               int64_t supers, int64_t t0, __m512 (&out)[G][NT], int64_t nsb,
               const PackedActivations& x) {
  constexpr uint64_t kSuper = super_bytes<kFive>();
  const int64_t n = nsb * kQKK, nb = nsb * 8;
  __m512 acc[G][NT];
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(char(0xF0));
  const __m512i six_bits = _mm512_set1_epi8(0x3F), low_six = _mm512_set1_epi32(0x3F);
  const __m512i fifth = _mm512_set1_epi8(0x10);
  for (int64_t s = 0; s < supers; ++s) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* wg = w + uint64_t(i) * stride_bytes + uint64_t(s) * kSuper;
      const int64_t sb = first + i * stride_units + s;
      __m512 sum_q[NT];
      for (int t = 0; t < NT; ++t) sum_q[t] = _mm512_setzero_ps();
      prefetch_ahead(wg, int(kQ4KCodes));  // the scales too: every line of the unit
      if constexpr (kFive) prefetch_ahead(wg + kQ5KHighBits, 512);
      const __m512i w0 = _mm512_load_si512(wg + kQ4KWords),
                    w1 = _mm512_load_si512(wg + kQ4KWords + 64);
      const __m512i sc_lo = _mm512_load_si512(wg + kQ4KWords + 128);
      // sc_{4+b}: the top 2 bits of byte b of words 0, 1, 2 as bits 0-1, 2-3, 4-5 (bits 6-7
      // are left over, masked with the rest when each scale is taken out).
      const __m512i sc_hi = _mm512_ternarylogic_epi32(
          _mm512_ternarylogic_epi32(_mm512_srli_epi32(w0, 6), _mm512_srli_epi32(w1, 4),
                                    _mm512_set1_epi8(0x03), 0xE4),
          _mm512_srli_epi32(sc_lo, 2), _mm512_set1_epi8(0x0F), 0xE4);
      // Scales of sub-blocks 2c, 2c + 1 in bytes 0, 1 of `pair` (shifted along as c moves on).
      __m512i pair = sc_lo;
      for (int c = 0; c < 4; ++c) {
        const uint8_t* qp = wg + kQ4KCodes + c * 512;
        prefetch_ahead(qp, 512);
        if (c == 2) pair = sc_hi;
        for (int h = 0; h < 2; ++h) {
          const int j = 2 * c + h;
          __m512 sc =
              _mm512_cvtepi32_ps(_mm512_and_si512(h ? _mm512_srli_epi32(pair, 8) : pair, low_six));
          if (!kFive && h) sc = _mm512_mul_ps(sc, _mm512_set1_ps(1.f / 16));
          __m512i q[8];
          for (int k = 0; k < 8; ++k) {
            const __m512i v = _mm512_load_si512(qp + 64 * k);
            if constexpr (kFive) {
              // Bit j of the fifth-bit bytes to bit 4 (16-bit shifts: the mask drops what
              // crosses a byte), then ternlog 0xEC: (nibble byte & 0x0F) | fifth bit.
              const __m512i hb = _mm512_load_si512(wg + kQ5KHighBits + 64 * k);
              const __m512i at4 = _mm512_and_si512(j <= 4 ? _mm512_slli_epi16(hb, unsigned(4 - j))
                                                          : _mm512_srli_epi16(hb, unsigned(j - 4)),
                                                   fifth);
              q[k] = _mm512_ternarylogic_epi32(h ? _mm512_srli_epi16(v, 4) : v, at4, low, 0xEC);
            } else {
              q[k] = _mm512_and_si512(v, h ? high : low);
            }
          }
          for (int t = 0; t < NT; ++t) {
            const auto* xq =
                reinterpret_cast<const int32_t*>(act_codes(x, t0 + t, n) + sb * kQKK + j * 32);
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int k = 0; k < 8; k += 2) {
              s0 = dpbusd_bcast(s0, q[k], xq + k);
              s1 = dpbusd_bcast(s1, q[k + 1], xq + k + 1);
            }
            sum_q[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), sc, sum_q[t]);
          }
        }
        pair = _mm512_srli_epi32(pair, 16);
      }
      const __m512 dv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg)));
      const __m512 mv =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg + 32)));
      const __m512i m0 = _mm512_and_si512(w0, six_bits), m1 = _mm512_and_si512(w1, six_bits);
      for (int t = 0; t < NT; ++t) {
        const int32_t* xs = act_sums(x, t0 + t, n) + sb * 8;
        // sum_j m_j sum(x_j), the sums split in high and low bytes (both fit s8).
        const __m512i mhi = dpbusd_bcast(dpbusd_bcast(_mm512_setzero_si512(), m0, xs), m1, xs + 1);
        const __m512i mlo =
            dpbusd_bcast(dpbusd_bcast(_mm512_setzero_si512(), m0, xs + 2), m1, xs + 3);
        const __m512 sum_m = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(mhi, 7), mlo));
        const __m512 v = _mm512_fnmadd_ps(mv, sum_m, _mm512_mul_ps(dv, sum_q[t]));
        acc[i][t] = _mm512_fmadd_ps(v, _mm512_set1_ps(x.d[(t0 + t) * nb + sb]), acc[i][t]);
      }
    }
  }
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) out[i][t] = acc[i][t];
}

template <bool kFive>
void k_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
            float* y, int64_t y_stride) {
  const int64_t nsb = n / kQKK;
  // Tiles of 4 tokens: 8 nibble vectors + two accumulators a token fit the 32 registers.
  gemm_streams<4>(w, g0, g1, nsb, super_bytes<kFive>(), x.n_tokens, y, y_stride,
                  [&](auto tile, auto g, auto&&... span) {
                    k_streams<kFive, decltype(tile)::value, decltype(g)::value>(span..., nsb, x);
                  });
}

}  // namespace

// Version 3: the source's 12 bytes of scales a row as 3 words (2: Q8_K activations, bytes of
// scales and mins, 2368 bytes a super-block; 1: Q8_0 activations).
const PackedLayout q4_k_packed = {.version = 3,
                                  .group_rows = kRows,
                                  .can_pack = q4_k_can_pack,
                                  .bytes = k_bytes<false>,
                                  .pack = k_pack<false>,
                                  .gemm = k_gemm<false>,
                                  .quantize = quantize_q8_k_split,
                                  .act_type = DType::Q8_K,
                                  .unpack_rows = k_unpack_rows<false>};

const PackedLayout q5_k_packed = {.version = 1,
                                  .group_rows = kRows,
                                  .can_pack = q4_k_can_pack,
                                  .bytes = k_bytes<true>,
                                  .pack = k_pack<true>,
                                  .gemm = k_gemm<true>,
                                  .quantize = quantize_q8_k_split,
                                  .act_type = DType::Q8_K,
                                  .unpack_rows = k_unpack_rows<true>};

}  // namespace hearth::kernels::avx512
