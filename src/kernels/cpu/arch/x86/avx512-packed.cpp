// AVX-512 packed layouts for Q4_0, MXFP4, Q8_0 and F16 (Q4_K: avx512-packed-q4k.cpp; the frame they
// share: avx512-packed-frame.h): 16 rows per group, one row per 32-bit lane, so a dot product
// needs no horizontal sums and one unpacked weight tile serves a token tile. Adding a type: its
// pack/gemm in a file like these and a PackedLayout in x86-tables.cpp (bump `version` on any
// byte change). Each layout's bytes are described above its code.
//
// MXFP4 (gpt-oss's experts; VNNI int8 dots), per group and pair of block columns (544 bytes,
// the file's 17 a block and row, so 32-byte aligned only: the codes are read unaligned):
//   [16 scale bytes e of column 2c][16 of column 2c+1]
//   [column 2c: 4 x 64 bytes][column 2c+1: 4 x 64 bytes], codes placed as Q4_0's.
// Q4_0 (VNNI int8 dots), per group and pair of 32-element block columns (576 bytes, aligned):
//   [16 fp16 scales of column 2c][16 fp16 scales of column 2c+1]
//   [column 2c: 4 x 64 bytes][column 2c+1: 4 x 64 bytes]
// where 64-byte vector k of a column holds, for lane r, bytes qs[4k..4k+3] of row r: its low
// nibbles are elements 4k..4k+3, its high nibbles elements 16+4k..16+4k+3.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "kernels/cpu/arch/x86/avx512-packed-frame.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx512 {

namespace {

using namespace packed;

// Q4_0 and Q8_0 share one frame: per group of 16 rows and pair of 32-element block columns,
// [16 fp16 scales of column 2c][16 of column 2c+1], then each column's codes (kColBytes).
// pair_pack / pair_unpack_rows walk that frame; the codes' order is the type's own.
bool pair_can_pack(int64_t d, int64_t n) {
  return d % kRows == 0 && n % (2 * kQK32) == 0;
}

template <uint64_t kColBytes>
uint64_t pair_bytes(int64_t d, int64_t n) {
  return uint64_t(d / kRows) * uint64_t(n / (2 * kQK32)) * (64 + 2 * kColBytes);
}

// put_codes(block, codes of its column, row r) places one source block's codes.
template <uint64_t kColBytes, class Block, class PutCodes>
void pair_pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n,
               PutCodes&& put_codes) {
  constexpr uint64_t kPair = 64 + 2 * kColBytes;
  const int64_t nb = n / kQK32;
  const auto* w = static_cast<const Block*>(src);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* out = dst + uint64_t(g) * uint64_t(nb / 2) * kPair;
    for (int64_t c = 0; c < nb; c += 2, out += kPair)
      for (int half = 0; half < 2; ++half)
        for (int r = 0; r < kRows; ++r) {
          const Block& b = w[(g * kRows + r) * nb + c + half];
          std::memcpy(out + half * 32 + r * 2, &b.d, 2);
          put_codes(b, out + 64 + half * kColBytes, r);
        }
  }
}

// row_values(codes of a column, row r, scale d, out[32]) writes one block's dequantized values.
template <uint64_t kColBytes, class RowValues>
void pair_unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out, RowValues&& row_values) {
  constexpr uint64_t kPair = 64 + 2 * kColBytes;
  const int64_t nb = n / kQK32;
  const uint8_t* in = w + uint64_t(g) * uint64_t(nb / 2) * kPair;
  for (int64_t c = 0; c < nb; c += 2, in += kPair)
    for (int half = 0; half < 2; ++half)
      for (int r = 0; r < kRows; ++r) {
        uint16_t dh;
        std::memcpy(&dh, in + half * 32 + r * 2, 2);
        row_values(in + 64 + half * kColBytes, r, fp16_to_f32(dh),
                   out + r * n + (c + half) * kQK32);
      }
}

// Q4_0 codes of a column: 4 x 64 bytes, vector k holding bytes qs[4k..4k+3] of row r in lane r.
constexpr uint64_t kQ4ColBytes = 4 * 64;
constexpr uint64_t kPairBytes = 64 + 2 * kQ4ColBytes;

uint64_t q4_0_bytes(int64_t d, int64_t n) {
  return pair_bytes<kQ4ColBytes>(d, n);
}

void q4_0_pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  pair_pack<kQ4ColBytes, BlockQ4_0>(src, dst, g0, g1, n,
                                    [](const BlockQ4_0& b, uint8_t* codes, int r) {
                                      for (int k = 0; k < 4; ++k)
                                        std::memcpy(codes + k * 64 + r * 4, b.qs + 4 * k, 4);
                                    });
}

void q4_0_unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  pair_unpack_rows<kQ4ColBytes>(w, g, n, out, [](const uint8_t* codes, int r, float d, float* o) {
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 4; ++j) {
        const uint8_t b = codes[k * 64 + r * 4 + j];
        o[4 * k + j] = d * float(int(b & 0xF) - 8);
        o[16 + 4 * k + j] = d * float(int(b >> 4) - 8);
      }
  });
}

// G streams of one group each against NT tokens (see run_streams): out[i][t] lanes = rows, for
// the 4-bit codes in Q4_0's placement (Q4_0, MXFP4). Codes says what differs: the pair's bytes
// and where its codes start, a half's scales per lane, a 64-byte vector's two nibble vectors
// for vpdpbusd, and how the two dot sums and the activation block's x.s (8 x its code sum)
// make the block's integer dot.
// Few uops per weight byte, as session 11 saw a loop that only loads the same bytes stream
// faster than the kernel (session 12 found most of that gap in the hand-out and the prefetch
// instead; this loop is worth a few %). Per 64 weight bytes for Q4_0: one load, two ands and
// two dot products with the activations broadcast from memory: the high nibbles stay in place
// (16 q, summed on their own and shifted back once per block, exact) and the offset-8
// correction is x.s, precomputed by the activation quantizer. Session 12, A/B with the previous
// loop (srli + and for the high nibbles, separate broadcasts, the correction built per block):
// hearth-decode-bench 5632x2048 24.5-25.4 GB/s against 23.3-25.3.
template <int NT, int G, class Codes>
void nibble_streams(const Codes& codes, const uint8_t* w, uint64_t stride_bytes,
                    int64_t stride_units, int64_t first, int64_t pairs, int64_t t0,
                    __m512 (&out)[G][NT], int64_t nb, const PackedActivations& x) {
  __m512 acc[G][NT];  // local, so the compiler keeps them in registers (out may alias)
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* wg = w + uint64_t(i) * stride_bytes + uint64_t(p) * Codes::kPair;
      prefetch_ahead(wg, int(Codes::kPair));
      for (int half = 0; half < 2; ++half) {
        const int64_t b = 2 * (first + i * stride_units + p) + half;
        const __m512 dw = codes.scales(wg, half);
        const uint8_t* qp = wg + Codes::kCodesAt + half * kQ4ColBytes;
        __m512i lo[4], hi[4];
        for (int k = 0; k < 4; ++k) codes.split(qp + 64 * k, lo[k], hi[k]);
        for (int t = 0; t < NT; ++t) {
          const int64_t tb = (t0 + t) * nb + b;
          const auto* xq =
              reinterpret_cast<const int32_t*>(act_codes(x, t0 + t, nb * kQK32) + b * kQK32);
          const int32_t xs = act_sums(x, t0 + t, nb * kQK32)[b];
          __m512i sl = _mm512_setzero_si512(), sh = _mm512_setzero_si512();
          for (int k = 0; k < 4; ++k) {
            sl = dpbusd_bcast(sl, lo[k], xq + k);
            sh = dpbusd_bcast(sh, hi[k], xq + 4 + k);
          }
          const __m512i isum = codes.dot(sl, sh, xs);
          const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[tb]));
          acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[i][t]);
        }
      }
    }
  }
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) out[i][t] = acc[i][t];
}

// Q4_0's codes for nibble_streams: fp16 scales, high nibbles left in place.
struct Q4_0Codes {
  static constexpr uint64_t kPair = kPairBytes;
  static constexpr uint64_t kCodesAt = 64;
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(char(0xF0));
  __m512 scales(const uint8_t* wg, int half) const {
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg + half * 32)));
  }
  void split(const uint8_t* q, __m512i& lo, __m512i& hi) const {
    const __m512i v = _mm512_load_si512(q);
    lo = _mm512_and_si512(v, low);
    hi = _mm512_and_si512(v, high);
  }
  // sum (q - 8) x = sum q x - 8 sum x; x.s holds 8 sum x.
  __m512i dot(__m512i sl, __m512i sh, int32_t xs) const {
    return _mm512_sub_epi32(_mm512_add_epi32(sl, _mm512_srai_epi32(sh, 4)), _mm512_set1_epi32(xs));
  }
};

void q4_0_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
               float* y, int64_t y_stride) {
  const int64_t nb = n / kQK32;
  // Tiles of 6 tokens: their accumulators stay in registers with the 8 weight vectors.
  gemm_streams<6>(w, g0, g1, nb / 2, kPairBytes, x.n_tokens, y, y_stride,
                  [&](auto tile, auto g, auto&&... span) {
                    nibble_streams<decltype(tile)::value, decltype(g)::value>(Q4_0Codes{}, span...,
                                                                              nb, x);
                  });
}

// MXFP4: Q4_0's codes, E8M0 bytes where Q4_0 keeps fp16 scales.
constexpr uint64_t kMxfp4PairBytes = 32 + 2 * kQ4ColBytes;

uint64_t mxfp4_bytes(int64_t d, int64_t n) {
  return uint64_t(d / kRows) * uint64_t(n / (2 * kQK32)) * kMxfp4PairBytes;
}

void mxfp4_pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  const int64_t nb = n / kQK32;
  const auto* w = static_cast<const BlockMxfp4*>(src);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* out = dst + uint64_t(g) * uint64_t(nb / 2) * kMxfp4PairBytes;
    for (int64_t c = 0; c < nb; c += 2, out += kMxfp4PairBytes)
      for (int half = 0; half < 2; ++half)
        for (int r = 0; r < kRows; ++r) {
          const BlockMxfp4& b = w[(g * kRows + r) * nb + c + half];
          out[half * 16 + r] = b.e;
          for (int k = 0; k < 4; ++k)
            std::memcpy(out + 32 + half * kQ4ColBytes + k * 64 + r * 4, b.qs + 4 * k, 4);
        }
  }
}

void mxfp4_unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  const int64_t nb = n / kQK32;
  const uint8_t* in = w + uint64_t(g) * uint64_t(nb / 2) * kMxfp4PairBytes;
  for (int64_t c = 0; c < nb; c += 2, in += kMxfp4PairBytes)
    for (int half = 0; half < 2; ++half)
      for (int r = 0; r < kRows; ++r) {
        const float d = mxfp4_scale(in[half * 16 + r]);
        const uint8_t* codes = in + 32 + half * kQ4ColBytes;
        float* o = out + r * n + (c + half) * kQK32;
        for (int k = 0; k < 4; ++k)
          for (int j = 0; j < 4; ++j) {
            const uint8_t b = codes[k * 64 + r * 4 + j];
            o[4 * k + j] = float(kMxfp4Values[b & 0xF]) * d;
            o[16 + 4 * k + j] = float(kMxfp4Values[b >> 4]) * d;
          }
      }
}

// 16 E8M0 bytes as mxfp4_scale's floats (2^(e - 128), subnormal below e = 2), one per lane.
inline __m512 mxfp4_scales(const uint8_t* e16) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e16)));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __mmask16 below_two = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(below_two, normal, tiny));
}

// MXFP4's codes for nibble_streams: each nibble looked up as its E2M1 value plus 12 (vpshufb:
// unsigned bytes for vpdpbusd), the offset taken back as 12 x the block's code sum: 3 / 2 of
// x.s (8 x the sum). Pairs are 32-byte aligned only: unaligned loads.
struct Mxfp4Codes {
  static constexpr uint64_t kPair = kMxfp4PairBytes;
  static constexpr uint64_t kCodesAt = 32;
  alignas(16) static constexpr int8_t kPlus12[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                     12, 11, 10, 9,  8,  6,  4,  0};
  static_assert(kMxfp4Values[5] + 12 == 18 && kMxfp4Values[15] + 12 == 0, "the table, plus 12");
  const __m512i lut =
      _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kPlus12)));
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 scales(const uint8_t* wg, int half) const { return mxfp4_scales(wg + half * 16); }
  void split(const uint8_t* q, __m512i& lo, __m512i& hi) const {
    const __m512i v = _mm512_loadu_si512(q);
    lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low));
    hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
  }
  __m512i dot(__m512i sl, __m512i sh, int32_t xs) const {
    return _mm512_sub_epi32(_mm512_add_epi32(sl, sh), _mm512_set1_epi32(xs / 2 * 3));
  }
};

void mxfp4_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
                float* y, int64_t y_stride) {
  const int64_t nb = n / kQK32;
  gemm_streams<6>(w, g0, g1, nb / 2, kMxfp4PairBytes, x.n_tokens, y, y_stride,
                  [&](auto tile, auto g, auto&&... span) {
                    nibble_streams<decltype(tile)::value, decltype(g)::value>(Mxfp4Codes{}, span...,
                                                                              nb, x);
                  });
}

// x [n] -> Q8_0 codes, scales and 8 x the sum of each block's codes, rounding exactly like
// ref::quantize_q8_0 (round half away from zero, scale rounded through fp16) so packed and unpacked
// kernels agree.
void quantize_q8_0_split(const float* x, int64_t n, int8_t* q, float* d, int32_t* s) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.f);
  const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  const __m512i sign = _mm512_set1_epi32(int(0x80000000u));
  for (int64_t b = 0; b < n / kQK32; ++b, x += kQK32, q += kQK32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float dd = amax / 127.f;
    const float id = dd != 0.f ? 1.f / dd : 0.f;
    d[b] = fp16_to_f32(f32_to_fp16(dd));
    __m512i codes[2];
    for (int h = 0; h < 2; ++h) {
      const __m512 v = _mm512_mul_ps(h ? v1 : v0, _mm512_set1_ps(id));
      const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __mmask16 away =
          _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
      const __m512 sgn_one = _mm512_castsi512_ps(_mm512_or_si512(
          _mm512_and_si512(_mm512_castps_si512(v), sign), _mm512_castps_si512(one)));
      __m512 r = _mm512_mask_add_ps(t, away, t, sgn_one);
      r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
      r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), r);  // NaN -> 0 like ref
      codes[h] = _mm512_cvtps_epi32(r);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * h), _mm512_cvtsepi32_epi8(codes[h]));
    }
    s[b] = 8 * _mm512_reduce_add_epi32(_mm512_add_epi32(codes[0], codes[1]));
  }
}

// x [n] -> int16 codes (in q, 2n bytes) and one f32 scale per 32-block, rounding exactly like
// ref::quantize_i16_blocks (ties to even by the instruction, not the caller's MXCSR). s unused.
void quantize_i16_split(const float* x, int64_t n, int8_t* q8, float* d, int32_t* s) {
  auto* q = reinterpret_cast<int16_t*>(q8);
  for (int64_t b = 0; b < n / kQK32; ++b, x += kQK32, q += kQK32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float dd = amax / 32767.f;
    const float id = dd != 0.f ? 1.f / dd : 0.f;
    d[b] = dd;
    s[b] = 0;
    for (int h = 0; h < 2; ++h) {
      const __m512 v = _mm512_mul_ps(h ? v1 : v0, _mm512_set1_ps(id));
      __m512i c = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      c = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), c);  // NaN -> 0 like ref
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16 * h), _mm512_cvtsepi32_epi16(c));
    }
  }
}

// acc + (i16 pairs of w) . (the 2 int16 at x, broadcast): the broadcast folded into the
// instruction, as dpbusd_bcast.
inline __m512i dpwssd_bcast(__m512i acc, __m512i w, const int32_t* x) {
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x));
  return acc;
}

// Q8_0 against int16 activations (quantize_i16_split), 16 rows per group, one row per lane.
// Per pair of block columns (1088 bytes, the size of the 32 source blocks): [16 fp16 scales of
// column 2c][... of 2c+1][column 2c: 32 x 16 bytes, element j of rows 0..15][column 2c+1: same].
// A column's products are exact int32 sums (|q| <= 127 x 32767 x 32 < 2^31), scaled once.
// The f32-activation loop it replaces spent two widenings and two FMAs per 32 products and was
// compute-bound from 2 tokens on (kjv-13m, 8 sequences a step: its matmuls 2.2x one token's);
// one vpdpwssd does 32, and a tile of 8 tokens shares each widened weight vector.
constexpr uint64_t kQ8ColBytes = 32 * 16;
constexpr uint64_t kQ8PairBytes = 64 + 2 * kQ8ColBytes;

uint64_t q8_0_bytes(int64_t d, int64_t n) {
  return pair_bytes<kQ8ColBytes>(d, n);
}

void q8_0_pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  pair_pack<kQ8ColBytes, BlockQ8_0>(src, dst, g0, g1, n,
                                    [](const BlockQ8_0& b, uint8_t* codes, int r) {
                                      for (int j = 0; j < kQK32; ++j)
                                        codes[j * 16 + r] = uint8_t(b.qs[j]);
                                    });
}

void q8_0_unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  pair_unpack_rows<kQ8ColBytes>(w, g, n, out, [](const uint8_t* codes, int r, float d, float* o) {
    for (int j = 0; j < kQK32; ++j) o[j] = d * float(int8_t(codes[j * 16 + r]));
  });
}

// Word order that turns [element 2k of rows 0..15][element 2k+1 of rows 0..15] (widened) into
// lane r = (row r's element 2k, its element 2k+1): what vpdpwssd pairs with x[2k], x[2k+1].
inline __m512i pair_rows_order() {
  alignas(64) int16_t idx[32];
  for (int r = 0; r < 16; ++r) idx[2 * r] = int16_t(r), idx[2 * r + 1] = int16_t(16 + r);
  return _mm512_load_si512(idx);
}

template <int NT, int G>
void q8_0_streams(const uint8_t* w, uint64_t stride_bytes, int64_t stride_units, int64_t first,
                  int64_t pairs, int64_t t0, __m512 (&out)[G][NT], int64_t n,
                  const PackedActivations& x) {
  // Few tokens leave few independent vpdpwssd chains: split each column's sum in two.
  constexpr int kChains = NT <= 2 ? 2 : 1;
  const int64_t nb = n / kQK32;
  const __m512i order = pair_rows_order();
  __m512 acc[G][NT];  // local, so the compiler keeps them in registers (out may alias)
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* wg = w + uint64_t(i) * stride_bytes + uint64_t(p) * kQ8PairBytes;
      prefetch_ahead(wg, int(kQ8PairBytes));
      for (int half = 0; half < 2; ++half) {
        const int64_t b = 2 * (first + i * stride_units + p) + half;
        const __m512 dw =
            _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg + half * 32)));
        const uint8_t* qp = wg + 64 + half * kQ8ColBytes;
        // The k loop below is unrolled so that k % kChains is a constant: where GCC kept it
        // (two tokens), both chains lived on the stack and every vpdpwssd waited on a store and a
        // load (32000 x 256, 2 tokens, one thread: 365-498 us against 141-163 for one token).
        __m512i isum[kChains][NT];
        for (int c = 0; c < kChains; ++c)
          for (int t = 0; t < NT; ++t) isum[c][t] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int k = 0; k < 16; ++k) {
          const __m512i wk = _mm512_permutexvar_epi16(
              order, _mm512_cvtepi8_epi16(
                         _mm256_load_si256(reinterpret_cast<const __m256i*>(qp + 32 * k))));
          for (int t = 0; t < NT; ++t) {
            const auto* xp =
                reinterpret_cast<const int32_t*>(act_codes(x, t0 + t, n)) + (b * kQK32 + 2 * k) / 2;
            isum[k % kChains][t] = dpwssd_bcast(isum[k % kChains][t], wk, xp);
          }
        }
        for (int t = 0; t < NT; ++t) {
          __m512i sum = isum[0][t];
          if constexpr (kChains == 2) sum = _mm512_add_epi32(sum, isum[1][t]);
          const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[(t0 + t) * nb + b]));
          acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[i][t]);
        }
      }
    }
  }
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) out[i][t] = acc[i][t];
}

void q8_0_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
               float* y, int64_t y_stride) {
  // Tiles of 8 tokens (a decode step of 8 sequences in one pass over the weights): 8 int32 and
  // 8 f32 accumulators with the weight vector stay in registers.
  gemm_streams<8>(w, g0, g1, n / (2 * kQK32), kQ8PairBytes, x.n_tokens, y, y_stride,
                  [&](auto tile, auto g, auto&&... span) {
                    q8_0_streams<decltype(tile)::value, decltype(g)::value>(span..., n, x);
                  });
}

// F16 with f32 activations, 16 rows per group: per pair of columns (64 bytes, the size of the
// source elements) [column j of rows 0..15][column j+1 of rows 0..15] as fp16. The products are
// exact f32 widenings of the file's values, as in the row kernel; only the summation order moves.
constexpr uint64_t kF16PairBytes = 2 * kRows * 2;

bool f16_can_pack(int64_t d, int64_t n) {
  return d % kRows == 0 && n % 2 == 0;
}

uint64_t f16_bytes(int64_t d, int64_t n) {
  return uint64_t(d) * uint64_t(n) * 2;
}

void f16_pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  const auto* w = static_cast<const uint16_t*>(src);
  for (int64_t g = g0; g < g1; ++g) {
    auto* out = reinterpret_cast<uint16_t*>(dst + uint64_t(g) * uint64_t(n / 2) * kF16PairBytes);
    for (int64_t j = 0; j < n; ++j)
      for (int r = 0; r < kRows; ++r) out[j * kRows + r] = w[(g * kRows + r) * n + j];
  }
}

void f16_unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  const auto* in =
      reinterpret_cast<const uint16_t*>(w + uint64_t(g) * uint64_t(n / 2) * kF16PairBytes);
  for (int64_t j = 0; j < n; ++j)
    for (int r = 0; r < kRows; ++r) out[r * n + j] = fp16_to_f32(in[j * kRows + r]);
}

// Units are column pairs (64 bytes); two accumulators per token and stream, summed at the end.
template <int NT, int G>
void f16_streams(const uint8_t* w, uint64_t stride_bytes, int64_t stride_units, int64_t first,
                 int64_t pairs, int64_t t0, __m512 (&acc)[G][NT], int64_t n, const float* x) {
  __m512 a1[G][NT];
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = a1[i][t] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* wg = w + uint64_t(i) * stride_bytes + uint64_t(p) * kF16PairBytes;
      prefetch_ahead(wg, 64);
      const int64_t j = 2 * (first + i * stride_units + p);
      // Two converts straight from memory: no extract of the upper half (one uop less per 64
      // bytes; see q4_0_streams on why uops per byte matter here).
      const __m512 w0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg)));
      const __m512 w1 =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg + 32)));
      for (int t = 0; t < NT; ++t) {
        const float* xt = x + (t0 + t) * n + j;
        acc[i][t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(xt[0]), acc[i][t]);
        a1[i][t] = _mm512_fmadd_ps(w1, _mm512_set1_ps(xt[1]), a1[i][t]);
      }
    }
  }
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_add_ps(acc[i][t], a1[i][t]);
}

void f16_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
              float* y, int64_t y_stride) {
  // Tiles of 8 tokens: 16 accumulators + 2 weight vectors stay in registers.
  gemm_streams<8>(w, g0, g1, n / 2, kF16PairBytes, x.n_tokens, y, y_stride,
                  [&](auto tile, auto g, auto&&... span) {
                    f16_streams<decltype(tile)::value, decltype(g)::value>(span..., n, x.x);
                  });
}

}  // namespace

const PackedLayout q8_0_packed = {.version = 1,
                                  .group_rows = kRows,
                                  .can_pack = pair_can_pack,
                                  .bytes = q8_0_bytes,
                                  .pack = q8_0_pack,
                                  .gemm = q8_0_gemm,
                                  .quantize = quantize_i16_split,
                                  .act_type = DType::I16,
                                  .unpack_rows = q8_0_unpack_rows};

const PackedLayout q4_0_packed = {.version = 1,
                                  .group_rows = kRows,
                                  .can_pack = pair_can_pack,
                                  .bytes = q4_0_bytes,
                                  .pack = q4_0_pack,
                                  .gemm = q4_0_gemm,
                                  .quantize = quantize_q8_0_split,
                                  .act_type = DType::Q8_0,
                                  .unpack_rows = q4_0_unpack_rows};

const PackedLayout mxfp4_packed = {.version = 1,
                                   .group_rows = kRows,
                                   .can_pack = pair_can_pack,
                                   .bytes = mxfp4_bytes,
                                   .pack = mxfp4_pack,
                                   .gemm = mxfp4_gemm,
                                   .quantize = quantize_q8_0_split,
                                   .act_type = DType::Q8_0,
                                   .unpack_rows = mxfp4_unpack_rows};

const PackedLayout f16_packed = {.version = 1,
                                 .group_rows = kRows,
                                 .can_pack = f16_can_pack,
                                 .bytes = f16_bytes,
                                 .pack = f16_pack,
                                 .gemm = f16_gemm,
                                 .quantize = nullptr,
                                 .act_type = DType::F32,
                                 .unpack_rows = f16_unpack_rows};

}  // namespace hearth::kernels::avx512
