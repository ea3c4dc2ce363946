// AVX2 packed Q6_K against int16 activations: the AVX2 table's first packed layout. Its bytes
// are described above its code; bump the layout's `version` on any byte change.
//
// Why: the AVX2 row kernel (avx2.cpp q6_k_tile) takes f32 activations and widens every 8 codes
// to floats, four shuffles a 16-value group on the one port that runs them: a 1B Q6_K decoded at
// 10.5 tok/s (14% of the roofline) and a 1B Q4_K_M lost ~30% to its Q6_K tensors. Here 8 rows
// sit in the 8 lanes, each lane holding a row's codes for two columns as int16 after one widening
// of 16 bytes; one `vpmaddwd` against the two columns' int16 activation codes (broadcast) adds
// both products for all 8 rows, exact in int32. The codes are stored as bytes (q - 32), 1.31x the
// file's 6.56 bits a weight, so no bit unpacking runs at all.
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

// Q6_K, 8 rows per group, one row per 32-bit lane. Per super-block (2208 bytes against the
// source's 8 x 210):
//   [8 f32 d, row r at r][16 sub-blocks j x 8 int8 scales, row r's of sub-block j at 8 j + r]
//   [128 column pairs p x 16 bytes: row r's codes q - 32 of columns 2p, 2p + 1 at 2r, 2r + 1]
constexpr uint64_t kScalesAt = 32, kCodesAt = kScalesAt + 128;
constexpr uint64_t kSuperBytes = kCodesAt + 128 * 16;

bool can_pack(int64_t d, int64_t n) {
  return d % kRows == 0 && n % kQKK == 0;
}

uint64_t packed_bytes(int64_t d, int64_t n) {
  return uint64_t(d / kRows) * uint64_t(n / kQKK) * kSuperBytes;
}

// The 256 codes q (0..63) of a source block in element order (ref::dequantize_q6_k's reading).
void block_codes(const BlockQ6_K& b, uint8_t (&c)[kQKK]) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* ql = b.ql + 64 * h;
      const int qh = b.qh[32 * h + l];
      uint8_t* o = c + 128 * h + l;
      o[0] = uint8_t((ql[l] & 0xF) | (qh & 3) << 4);
      o[32] = uint8_t((ql[l + 32] & 0xF) | (qh >> 2 & 3) << 4);
      o[64] = uint8_t((ql[l] >> 4) | (qh >> 4 & 3) << 4);
      o[96] = uint8_t((ql[l + 32] >> 4) | (qh >> 6 & 3) << 4);
    }
}

void pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  const int64_t nsb = n / kQKK;
  const auto* w = static_cast<const BlockQ6_K*>(src);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* out = dst + uint64_t(g) * uint64_t(nsb) * kSuperBytes;
    for (int64_t i = 0; i < nsb; ++i, out += kSuperBytes) {
      for (int r = 0; r < kRows; ++r) {
        const BlockQ6_K& b = w[(g * kRows + r) * nsb + i];
        const float d = fp16_to_f32(b.d);
        std::memcpy(out + 4 * r, &d, 4);
        for (int j = 0; j < 16; ++j) out[kScalesAt + 8 * j + r] = uint8_t(b.scales[j]);
        uint8_t c[kQKK];
        block_codes(b, c);
        for (int e = 0; e < kQKK; ++e)
          out[kCodesAt + 16 * uint64_t(e / 2) + 2 * r + e % 2] = uint8_t(int8_t(c[e] - 32));
      }
    }
  }
}

void unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  const int64_t nsb = n / kQKK;
  const uint8_t* in = w + uint64_t(g) * uint64_t(nsb) * kSuperBytes;
  for (int64_t i = 0; i < nsb; ++i, in += kSuperBytes)
    for (int r = 0; r < kRows; ++r) {
      float d;
      std::memcpy(&d, in + 4 * r, 4);
      for (int e = 0; e < kQKK; ++e) {
        const float ds = d * float(int8_t(in[kScalesAt + 8 * (e / 16) + r]));  // as the reference
        out[r * n + i * kQKK + e] = ds * float(int8_t(in[kCodesAt + 16 * (e / 2) + 2 * r + e % 2]));
      }
    }
}

// NT tokens of row group g: per sub-block and token, 8 `vpmaddwd` into an int32 sum (at most
// 16 x 32 x 32767: exact), then one convert, the rows' scales and the activation block's scale;
// the rows' d once a super-block.
template <int NT>
void group_tile(const uint8_t* w, int64_t nsb, int64_t n, const PackedActivations& x, int64_t t0,
                float* y, int64_t y_stride) {
  const int64_t nb = n / kQK32;
  __m256 acc[NT];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s, w += kSuperBytes) {
    // The next super-block's d and scales now, its codes a sub-block at a time below: the L2
    // streamer stops at page boundaries.
    for (int o = 0; o < int(kCodesAt); o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w + kSuperBytes + o), _MM_HINT_T0);
    __m256 sum[NT];
    for (__m256& v : sum) v = _mm256_setzero_ps();
    for (int j = 0; j < 16; ++j) {
      for (int o = 0; o < 128; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w + kSuperBytes + kCodesAt + 128 * j + o),
                     _MM_HINT_T0);
      __m256i isum[NT];
      for (__m256i& v : isum) v = _mm256_setzero_si256();
      for (int p = 0; p < 8; ++p) {
        const __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(
            reinterpret_cast<const __m128i*>(w + kCodesAt + 16 * uint64_t(8 * j + p))));
        for (int t = 0; t < NT; ++t) {
          const int8_t* a = act_codes(x, t0 + t, n) + 2 * (s * kQKK + 16 * j + 2 * p);
          int32_t pair;
          std::memcpy(&pair, a, 4);
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(wv, _mm256_set1_epi32(pair)));
        }
      }
      const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + kScalesAt + 8 * j))));
      for (int t = 0; t < NT; ++t) {
        const __m256 xd = _mm256_broadcast_ss(&x.d[(t0 + t) * nb + s * 8 + j / 2]);
        sum[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(isum[t]), sc), xd, sum[t]);
      }
    }
    const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(w));
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_fmadd_ps(sum[t], dw, acc[t]);
  }
  for (int t = 0; t < NT; ++t) {
    alignas(32) float lanes[kRows];
    _mm256_store_ps(lanes, acc[t]);
    for (int r = 0; r < kRows; ++r) y[(t0 + t) * y_stride + r] = lanes[r];
  }
}

// Token tiles of up to 4 (outer, so a tile's activations stay in L1 across the row groups).
void gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x, float* y,
          int64_t y_stride) {
  const int64_t nsb = n / kQKK;
  const uint64_t group_bytes = uint64_t(nsb) * kSuperBytes;
  for (int64_t t0 = 0; t0 < x.n_tokens; t0 += 4) {
    const int64_t nt = x.n_tokens - t0 < 4 ? x.n_tokens - t0 : 4;
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* wg = w + uint64_t(g) * group_bytes;
      float* yg = y + g * kRows;
      switch (nt) {
        case 1:
          group_tile<1>(wg, nsb, n, x, t0, yg, y_stride);
          break;
        case 2:
          group_tile<2>(wg, nsb, n, x, t0, yg, y_stride);
          break;
        case 3:
          group_tile<3>(wg, nsb, n, x, t0, yg, y_stride);
          break;
        default:
          group_tile<4>(wg, nsb, n, x, t0, yg, y_stride);
          break;
      }
    }
  }
}

}  // namespace

const PackedLayout q6_k_packed = {.version = 1,
                                  .group_rows = kRows,
                                  .can_pack = can_pack,
                                  .bytes = packed_bytes,
                                  .pack = pack,
                                  .gemm = gemm,
                                  .quantize = quantize_i16,
                                  .act_type = DType::I16,
                                  .unpack_rows = unpack_rows};

}  // namespace hearth::kernels::avx2
