// AVX-512 packed layouts for Q4_0, Q8_0, Q4_K and F16: 16 rows per group, one row per 32-bit lane,
// so a dot product needs no horizontal sums and one unpacked weight tile serves a token tile.
// Adding a type: its pack/gemm here and a PackedLayout in x86-tables.cpp (bump `version` on any
// byte change). Each layout's bytes are described above its code.
//
// Q4_0 (VNNI int8 dots), per group and pair of 32-element block columns (576 bytes, aligned):
//   [16 fp16 scales of column 2c][16 fp16 scales of column 2c+1]
//   [column 2c: 4 x 64 bytes][column 2c+1: 4 x 64 bytes]
// where 64-byte vector k of a column holds, for lane r, bytes qs[4k..4k+3] of row r: its low
// nibbles are elements 4k..4k+3, its high nibbles elements 16+4k..16+4k+3.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "kernels/cpu/arch/x86/x86-kernels.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx512 {

namespace {

constexpr int kRows = 16;

// Software prefetch this many bytes ahead of the weight stream: the L2 streamer stops at 4 KiB
// page boundaries, so without it every new page starts with a demand miss. Every line of every
// unit: session 12 measured F16 prefetching every other line (leaving the odd ones to the
// adjacent-line prefetcher) at 21-22 GB/s against 26-27 for every line, and the Q4_K
// super-block's 320 bytes of scales unprefetched at 23.2-23.5 against 23.7-24.5 (the 1B
// decode's matmuls in sequence, alternating runs).
constexpr int kPrefetchAhead = 2048;

inline void prefetch_ahead(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + o), _MM_HINT_T0);
}

// The loop every packed gemm shares: token tiles of up to kTile (outer, so a tile's activations
// stay in L1 across the row groups), row groups [g0, g1) inner. group(tile, wg, t0, yg) runs
// one group against the tile; `tile` is std::integral_constant<int, tokens in this tile>, so
// each tail size gets its own register-blocked instantiation.
template <int kTile, class Fn>
void dispatch_tile(int nt, Fn&& fn) {
  if constexpr (kTile > 1) {
    if (nt < kTile) return dispatch_tile<kTile - 1>(nt, fn);
  }
  fn(std::integral_constant<int, kTile>{});
}

template <int kTile, class GroupFn>
void for_each_tile(const uint8_t* w, uint64_t group_bytes, int64_t g0, int64_t g1, int64_t n_tokens,
                   float* y, GroupFn&& group) {
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
    const int nt = int(n_tokens - t0 < kTile ? n_tokens - t0 : kTile);
    for (int64_t g = g0; g < g1; ++g)
      dispatch_tile<kTile>(
          nt, [&](auto tile) { group(tile, w + uint64_t(g) * group_bytes, t0, y + g * kRows); });
  }
}

// A group's dot products, optionally as several streams walked in lockstep. One token (decode)
// is bound by memory, and one sequential stream per thread leaves most of the L2 streamer's
// trackers idle (a file-backed read here: ~22 GB/s with one stream a thread, ~28 with four).
// With kSplit > 1 and NT == 1 the group's `units` (column pairs, super-blocks) are cut into
// kSplit equal ranges read side by side, plus a tail; wider tiles are compute-heavier and keep
// one stream (the token tile takes the registers). Measured (session 8, 2 threads, weights on
// 2 MiB pages; hearth-decode-bench 2048x5632 as % of a plain read, then 1B tg128 as % of the
// roofline, alternating runs): Q4_0 1 stream 69-74% / 66%, 2 streams 82-84% / 73-75%, 4 streams
// 78-83% / 64-65%; Q8_0 71-73% / 59-60%, 83-84% / 61-65%, 78-82% / 59-62%; Q4_K 68-70% / 61%,
// 73-74% / 62%, 74-76% / 54%; F16 (session 3, in the model) 4 streams 61-62% against 49-50%
// with one. Session 12, with every line prefetched and contiguous shares per thread (the 1B
// decode's matmuls in sequence, three alternating rounds): F16 1 stream 25.4-26.6 GB/s, 2
// streams 26.2-27.5, 4 streams 26.1-26.5. So every layout reads 2.
// streams(G, w, stride_bytes, stride_units, first_unit, units, acc) runs G streams, stream i
// over units [first_unit + i * stride_units, ... + units) whose bytes start at
// w + i * stride_bytes, into acc[i][t]; the sum lands at y + (t0 + t) * y_stride. Only the
// summation order changes.
template <int NT, int kSplit, class Streams>
void run_streams(const uint8_t* w, int64_t units, uint64_t unit_bytes, float* y, int64_t t0,
                 int64_t y_stride, Streams&& streams) {
  __m512 out[NT];
  const int64_t len = NT == 1 && kSplit > 1 ? units / kSplit : 0;
  int64_t done = 0;
  for (int t = 0; t < NT; ++t) out[t] = _mm512_setzero_ps();
  if (len > 0) {
    // The next group's streams after the first start where no look-ahead reaches (stream 0
    // continues this group's last stream): prefetch their heads now, a group's time ahead.
    // Session 12, the 1B decode's matmuls in sequence, pairs of runs: Q4_0 +3 +4 -2 +11 -2%,
    // Q8_0 +13 +9%, F16 +2 +1 +5%, Q4_K -7 +3%.
    const uint8_t* next = w + uint64_t(units) * unit_bytes;
    for (int i = 1; i < kSplit; ++i)
      for (int o = 0; o < kPrefetchAhead; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + uint64_t(i * len) * unit_bytes + o),
                     _MM_HINT_T0);
    __m512 acc[kSplit][NT];
    streams(std::integral_constant<int, kSplit>{}, w, uint64_t(len) * unit_bytes, len, 0, len, acc);
    for (int i = 0; i < kSplit; ++i)
      for (int t = 0; t < NT; ++t) out[t] = _mm512_add_ps(out[t], acc[i][t]);
    done = kSplit * len;
  }
  if (done < units) {
    __m512 acc[1][NT];
    streams(std::integral_constant<int, 1>{}, w + uint64_t(done) * unit_bytes, 0, 0, done,
            units - done, acc);
    for (int t = 0; t < NT; ++t) out[t] = _mm512_add_ps(out[t], acc[0][t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + (t0 + t) * y_stride, out[t]);
}

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

// acc + (u8 lanes of w) . (the 4 signed bytes at x, broadcast), with the broadcast folded into
// the instruction: GCC emits a separate vpbroadcastd for the intrinsic form.
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const int32_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x));
  return acc;
}

// G streams of one group each against NT tokens (see run_streams): out[i][t] lanes = rows.
// Few uops per weight byte, as session 11 saw a loop that only loads the same bytes stream
// faster than the kernel (session 12 found most of that gap in the hand-out and the prefetch
// instead; this loop is worth a few %). Per 64 weight bytes: one load, two ands and two dot
// products with the activations broadcast from memory: the
// high nibbles stay in place (16 q, summed on their own and shifted back once per block, exact)
// and the offset-8 correction is x.s, precomputed by the activation quantizer. Session 12, A/B
// with the previous loop (srli + and for the high nibbles, separate broadcasts, the correction
// built per block): hearth-decode-bench 5632x2048 24.5-25.4 GB/s against 23.3-25.3.
template <int NT, int G>
void q4_0_streams(const uint8_t* w, uint64_t stride_bytes, int64_t stride_units, int64_t first,
                  int64_t pairs, int64_t nb, const PackedActivations& x, int64_t t0,
                  __m512 (&out)[G][NT]) {
  __m512 acc[G][NT];  // local, so the compiler keeps them in registers (out may alias)
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(char(0xF0));
  for (int64_t p = 0; p < pairs; ++p) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* wg = w + uint64_t(i) * stride_bytes + uint64_t(p) * kPairBytes;
      prefetch_ahead(wg, int(kPairBytes));
      for (int half = 0; half < 2; ++half) {
        const int64_t b = 2 * (first + i * stride_units + p) + half;
        const __m512 dw =
            _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg + half * 32)));
        const uint8_t* qp = wg + 64 + half * 256;
        __m512i lo[4], hi[4];
        for (int k = 0; k < 4; ++k) {
          const __m512i v = _mm512_load_si512(qp + 64 * k);
          lo[k] = _mm512_and_si512(v, low);
          hi[k] = _mm512_and_si512(v, high);
        }
        for (int t = 0; t < NT; ++t) {
          const int64_t tb = (t0 + t) * nb + b;
          const auto* xq = reinterpret_cast<const int32_t*>(x.q + tb * kQK32);
          __m512i sl = _mm512_setzero_si512(), sh = _mm512_setzero_si512();
          for (int k = 0; k < 4; ++k) {
            sl = dpbusd_bcast(sl, lo[k], xq + k);
            sh = dpbusd_bcast(sh, hi[k], xq + 4 + k);
          }
          // sum (q - 8) x = sum q x - 8 sum x; x.s holds 8 sum x.
          const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(sl, _mm512_srai_epi32(sh, 4)),
                                                _mm512_set1_epi32(x.s[tb]));
          const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[tb]));
          acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[i][t]);
        }
      }
    }
  }
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) out[i][t] = acc[i][t];
}

// One group of 16 rows against NT tokens: lanes = rows.
template <int NT>
void q4_0_group(const uint8_t* wg, int64_t nb, const PackedActivations& x, int64_t t0, float* y,
                int64_t y_stride) {
  run_streams<NT, 2>(wg, nb / 2, kPairBytes, y, t0, y_stride,
                     [&](auto g, const uint8_t* w, uint64_t sb, int64_t su, int64_t first,
                         int64_t units, auto& acc) {
                       q4_0_streams<NT, decltype(g)::value>(w, sb, su, first, units, nb, x, t0,
                                                            acc);
                     });
}

void q4_0_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
               float* y, int64_t y_stride) {
  const int64_t nb = n / kQK32;
  const uint64_t group_bytes = uint64_t(nb / 2) * kPairBytes;
  // Tiles of 6 tokens: their accumulators stay in registers with the 8 weight vectors.
  for_each_tile<6>(w, group_bytes, g0, g1, x.n_tokens, y,
                   [&](auto tile, const uint8_t* wg, int64_t t0, float* yg) {
                     constexpr int NT = decltype(tile)::value;
                     q4_0_group<NT>(wg, nb, x, t0, yg, y_stride);
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

// Q8_0 with f32 activations, 16 rows per group, one row per lane. Per pair of block columns
// (1088 bytes, the size of the 32 source blocks): [16 fp16 scales of column 2c][... of 2c+1]
// [column 2c: 32 x 16 bytes, element j of rows 0..15][column 2c+1: same].
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

template <int NT, int G>
void q8_0_streams(const uint8_t* w, uint64_t stride_bytes, int64_t stride_units, int64_t first,
                  int64_t pairs, int64_t n, const PackedActivations& x, int64_t t0,
                  __m512 (&acc)[G][NT]) {
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* wg = w + uint64_t(i) * stride_bytes + uint64_t(p) * kQ8PairBytes;
      prefetch_ahead(wg, int(kQ8PairBytes));
      for (int half = 0; half < 2; ++half) {
        const int64_t e0 = (2 * (first + i * stride_units + p) + half) * kQK32;
        const __m512 dw =
            _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(wg + half * 32)));
        const uint8_t* qp = wg + 64 + half * 512;
        // Two partial sums per token so consecutive FMAs do not wait on each other.
        __m512 s0[NT], s1[NT];
        for (int t = 0; t < NT; ++t) s0[t] = s1[t] = _mm512_setzero_ps();
        for (int j = 0; j < kQK32; j += 2) {
          const __m512 w0 = _mm512_cvtepi32_ps(
              _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(qp + 16 * j))));
          const __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
              _mm_load_si128(reinterpret_cast<const __m128i*>(qp + 16 * j + 16))));
          for (int t = 0; t < NT; ++t) {
            const float* xt = x.x + (t0 + t) * n + e0;
            s0[t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(xt[j]), s0[t]);
            s1[t] = _mm512_fmadd_ps(w1, _mm512_set1_ps(xt[j + 1]), s1[t]);
          }
        }
        for (int t = 0; t < NT; ++t)
          acc[i][t] = _mm512_fmadd_ps(_mm512_add_ps(s0[t], s1[t]), dw, acc[i][t]);
      }
    }
  }
}

template <int NT>
void q8_0_group(const uint8_t* wg, int64_t n, const PackedActivations& x, int64_t t0, float* y,
                int64_t y_stride) {
  run_streams<NT, 2>(wg, n / (2 * kQK32), kQ8PairBytes, y, t0, y_stride,
                     [&](auto g, const uint8_t* w, uint64_t sb, int64_t su, int64_t first,
                         int64_t units, auto& acc) {
                       q8_0_streams<NT, decltype(g)::value>(w, sb, su, first, units, n, x, t0, acc);
                     });
}

void q8_0_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
               float* y, int64_t y_stride) {
  const uint64_t group_bytes = uint64_t(n / (2 * kQK32)) * kQ8PairBytes;
  for_each_tile<4>(w, group_bytes, g0, g1, x.n_tokens, y,
                   [&](auto tile, const uint8_t* wg, int64_t t0, float* yg) {
                     constexpr int NT = decltype(tile)::value;
                     q8_0_group<NT>(wg, n, x, t0, yg, y_stride);
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
                 int64_t pairs, int64_t n, const float* x, int64_t t0, __m512 (&acc)[G][NT]) {
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

template <int NT>
void f16_group(const uint8_t* wg, int64_t n, const float* x, int64_t t0, float* y,
               int64_t y_stride) {
  run_streams<NT, 2>(wg, n / 2, kF16PairBytes, y, t0, y_stride,
                     [&](auto g, const uint8_t* w, uint64_t sb, int64_t su, int64_t first,
                         int64_t units, auto& acc) {
                       f16_streams<NT, decltype(g)::value>(w, sb, su, first, units, n, x, t0, acc);
                     });
}

void f16_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
              float* y, int64_t y_stride) {
  const uint64_t group_bytes = uint64_t(n / 2) * kF16PairBytes;
  // Tiles of 8 tokens: 16 accumulators + 2 weight vectors stay in registers.
  for_each_tile<8>(w, group_bytes, g0, g1, x.n_tokens, y,
                   [&](auto tile, const uint8_t* wg, int64_t t0, float* yg) {
                     constexpr int NT = decltype(tile)::value;
                     f16_group<NT>(wg, n, x.x, t0, yg, y_stride);
                   });
}

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
constexpr uint64_t kQ4KSuperBytes = 64 + 3 * 64 + 4 * 8 * 64;
constexpr uint64_t kQ4KWords = 64, kQ4KCodes = 256;

bool q4_k_can_pack(int64_t d, int64_t n) {
  return d % kRows == 0 && n % kQKK == 0;
}

uint64_t q4_k_bytes(int64_t d, int64_t n) {
  return uint64_t(d / kRows) * uint64_t(n / kQKK) * kQ4KSuperBytes;
}

// Offset of byte b of row r's scale word v (0..2) in a packed super-block.
constexpr uint64_t q4_k_word_byte(int v, int r, int b) {
  return kQ4KWords + uint64_t(v * 64 + r * 4 + b);
}

void q4_k_pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  const int64_t nsb = n / kQKK;
  const auto* w = static_cast<const BlockQ4_K*>(src);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* out = dst + uint64_t(g) * uint64_t(nsb) * kQ4KSuperBytes;
    for (int64_t i = 0; i < nsb; ++i, out += kQ4KSuperBytes)
      for (int r = 0; r < kRows; ++r) {
        const BlockQ4_K& b = w[(g * kRows + r) * nsb + i];
        std::memcpy(out + r * 2, &b.d, 2);
        std::memcpy(out + 32 + r * 2, &b.dmin, 2);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; ++j) kquant_scale_min(j, b.scales, &sc[j], &m[j]);
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

void q4_k_unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  const int64_t nsb = n / kQKK;
  const uint8_t* in = w + uint64_t(g) * uint64_t(nsb) * kQ4KSuperBytes;
  for (int64_t i = 0; i < nsb; ++i, in += kQ4KSuperBytes) {
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
          for (int e = 0; e < 4; ++e)
            o[4 * kk + e] =
                dj * float((in[kQ4KCodes + c * 512 + kk * 64 + r * 4 + e] >> shift) & 0xF) - mj;
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
template <int NT, int G>
void q4_k_streams(const uint8_t* w, uint64_t stride_bytes, int64_t stride_units, int64_t first,
                  int64_t supers, int64_t nsb, const PackedActivations& x, int64_t t0,
                  __m512 (&out)[G][NT]) {
  const int64_t n = nsb * kQKK, nb = nsb * 8;
  __m512 acc[G][NT];
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(char(0xF0));
  const __m512i six_bits = _mm512_set1_epi8(0x3F), low_six = _mm512_set1_epi32(0x3F);
  for (int64_t s = 0; s < supers; ++s) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* wg = w + uint64_t(i) * stride_bytes + uint64_t(s) * kQ4KSuperBytes;
      const int64_t sb = first + i * stride_units + s;
      __m512 sum_q[NT];
      for (int t = 0; t < NT; ++t) sum_q[t] = _mm512_setzero_ps();
      prefetch_ahead(wg, int(kQ4KCodes));  // the scales too: every line of the unit
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
          if (h) sc = _mm512_mul_ps(sc, _mm512_set1_ps(1.f / 16));
          __m512i q[8];
          for (int k = 0; k < 8; ++k)
            q[k] = _mm512_and_si512(_mm512_load_si512(qp + 64 * k), h ? high : low);
          for (int t = 0; t < NT; ++t) {
            const auto* xq =
                reinterpret_cast<const int32_t*>(x.q + (t0 + t) * n + sb * kQKK + j * 32);
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
        const int32_t* xs = x.s + (t0 + t) * nb + sb * 8;
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

template <int NT>
void q4_k_group(const uint8_t* wg, int64_t nsb, const PackedActivations& x, int64_t t0, float* y,
                int64_t y_stride) {
  run_streams<NT, 2>(wg, nsb, kQ4KSuperBytes, y, t0, y_stride,
                     [&](auto g, const uint8_t* w, uint64_t sb, int64_t su, int64_t first,
                         int64_t units, auto& acc) {
                       q4_k_streams<NT, decltype(g)::value>(w, sb, su, first, units, nsb, x, t0,
                                                            acc);
                     });
}

void q4_k_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
               float* y, int64_t y_stride) {
  const int64_t nsb = n / kQKK;
  const uint64_t group_bytes = uint64_t(nsb) * kQ4KSuperBytes;
  // Tiles of 4 tokens: 8 nibble vectors + two accumulators a token fit the 32 registers.
  for_each_tile<4>(w, group_bytes, g0, g1, x.n_tokens, y,
                   [&](auto tile, const uint8_t* wg, int64_t t0, float* yg) {
                     constexpr int NT = decltype(tile)::value;
                     q4_k_group<NT>(wg, nsb, x, t0, yg, y_stride);
                   });
}

}  // namespace

const PackedLayout q8_0_packed = {.version = 1,
                                  .group_rows = kRows,
                                  .can_pack = pair_can_pack,
                                  .bytes = q8_0_bytes,
                                  .pack = q8_0_pack,
                                  .gemm = q8_0_gemm,
                                  .quantize = nullptr,
                                  .act_type = DType::F32,
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

// Version 3: the source's 12 bytes of scales a row as 3 words (2: Q8_K activations, bytes of
// scales and mins, 2368 bytes a super-block; 1: Q8_0 activations).
const PackedLayout q4_k_packed = {.version = 3,
                                  .group_rows = kRows,
                                  .can_pack = q4_k_can_pack,
                                  .bytes = q4_k_bytes,
                                  .pack = q4_k_pack,
                                  .gemm = q4_k_gemm,
                                  .quantize = quantize_q8_k_split,
                                  .act_type = DType::Q8_K,
                                  .unpack_rows = q4_k_unpack_rows};

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
