// AVX-512 packed Q6_K against int16 activations split into two signed bytes (the frame:
// avx512-packed-frame.h). Its bytes are described above its code; bump the layout's `version`
// on any byte change.
//
// Why int16: 8-bit activations doubled the KL of Q6_K files (docs/performance.md), so the row
// kernel kept f32 activations and spent its time widening each 16-value group to floats (25-45%
// of the decode roofline on a 1B Q6_K; every Q4_K_M file keeps its LM head and half its
// ffn_down in Q6_K). Here the 6-bit codes stay bytes: a code c (0..63) meets activation code
// a = 256 hi + lo in two byte dot products, c.a = 256 (c.hi) + c.lo, exact in int32, and the
// codes' offset of 32 comes back through the activations' per-16 sums, -32 sum(a), which the
// quantizer stores.
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

// x [n] -> per 32-block a scale d = amax / kSplitI16CodeMax and codes rounded exactly like
// ref::quantize_i16_blocks(..., kSplitI16CodeMax) (ties to even by the instruction, not the
// caller's MXCSR), stored split: q [0, n) the low bytes lo = a - 256 hi, q [n, 2n) the high
// bytes hi = (a + 128) >> 8, both in [-127, 127]; s [n / 16] holds -32 x each 16 codes' sum.
void quantize_i16_bytes(const float* x, int64_t n, int8_t* q, float* d, int32_t* s) {
  const __m512 lim = _mm512_set1_ps(float(kSplitI16CodeMax));
  for (int64_t b = 0; b < n / kQK32; ++b, x += kQK32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float dd = amax / float(kSplitI16CodeMax);
    const float id = dd != 0.f ? 1.f / dd : 0.f;
    d[b] = dd;
    for (int h = 0; h < 2; ++h) {
      const __m512 v = _mm512_mul_ps(h ? v1 : v0, _mm512_set1_ps(id));
      const __m512 r =
          _mm512_min_ps(_mm512_max_ps(v, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
      __m512i c = _mm512_cvt_roundps_epi32(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      c = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), c);  // NaN -> 0 like ref
      const __m512i hi = _mm512_srai_epi32(_mm512_add_epi32(c, _mm512_set1_epi32(128)), 8);
      const __m512i lo = _mm512_sub_epi32(c, _mm512_slli_epi32(hi, 8));
      const int64_t at = b * kQK32 + 16 * h;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + at), _mm512_cvtepi32_epi8(lo));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + n + at), _mm512_cvtepi32_epi8(hi));
      s[2 * b + h] = -32 * _mm512_reduce_add_epi32(c);  // |sum| <= 16 x 32639: no overflow
    }
  }
}

// Q6_K, 16 rows per group, one row per 32-bit lane. Per super-block (3392 bytes: the source's
// 3360 with d widened to f32):
//   [16 f32 d, row r at r][16 groups j x 16 int8 scales, row r's scale of group j at 16 j + r]
//   [16 groups j x (N0, N1, H: 3 x 64 bytes)]
// Group j holds elements 16 j .. 16 j + 15 of each row as four code vectors k = 0..3: lane r,
// byte e of vector k is row r's code c = q + 32 (0..63) of element 16 j + 4 k + e. N0 keeps
// vectors 0 and 1's low four bits (low and high nibbles of each byte), N1 those of vectors 2
// and 3, and H their top two bits, vector k's at bits 2k, 2k+1 of the byte.
constexpr uint64_t kQ6KScalesAt = 64, kQ6KCodesAt = 64 + 256, kQ6KGroupBytes = 3 * 64;
constexpr uint64_t kQ6KSuperBytes = kQ6KCodesAt + 16 * kQ6KGroupBytes;

bool q6_k_can_pack(int64_t d, int64_t n) {
  return d % kRows == 0 && n % kQKK == 0;
}

uint64_t q6_k_bytes(int64_t d, int64_t n) {
  return uint64_t(d / kRows) * uint64_t(n / kQKK) * kQ6KSuperBytes;
}

// Offset, within group j's 192 bytes, of the byte holding lane r, byte e of code vector k.
constexpr uint64_t q6_k_lane_byte(int r, int e) {
  return uint64_t(r * 4 + e);
}

void q6_k_pack(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n) {
  const int64_t nsb = n / kQKK;
  const auto* w = static_cast<const BlockQ6_K*>(src);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* out = dst + uint64_t(g) * uint64_t(nsb) * kQ6KSuperBytes;
    for (int64_t i = 0; i < nsb; ++i, out += kQ6KSuperBytes) {
      std::memset(out, 0, kQ6KSuperBytes);
      for (int r = 0; r < kRows; ++r) {
        const BlockQ6_K& b = w[(g * kRows + r) * nsb + i];
        const float d = fp16_to_f32(b.d);
        std::memcpy(out + 4 * r, &d, 4);
        uint8_t c[kQKK];
        q6_k_codes(b, c);
        for (int j = 0; j < 16; ++j) {
          out[kQ6KScalesAt + 16 * j + r] = uint8_t(b.scales[j]);
          uint8_t* grp = out + kQ6KCodesAt + uint64_t(j) * kQ6KGroupBytes;
          for (int k = 0; k < 4; ++k)
            for (int e = 0; e < 4; ++e) {
              const uint8_t code = c[16 * j + 4 * k + e];
              const uint64_t at = q6_k_lane_byte(r, e);
              grp[(k / 2) * 64 + at] |= uint8_t((code & 0xF) << 4 * (k % 2));
              grp[128 + at] |= uint8_t((code >> 4) << 2 * k);
            }
        }
      }
    }
  }
}

void q6_k_unpack_rows(const uint8_t* w, int64_t g, int64_t n, float* out) {
  const int64_t nsb = n / kQKK;
  const uint8_t* in = w + uint64_t(g) * uint64_t(nsb) * kQ6KSuperBytes;
  for (int64_t i = 0; i < nsb; ++i, in += kQ6KSuperBytes)
    for (int r = 0; r < kRows; ++r) {
      float d;
      std::memcpy(&d, in + 4 * r, 4);
      for (int j = 0; j < 16; ++j) {
        const float ds = d * float(int8_t(in[kQ6KScalesAt + 16 * j + r]));  // as the reference
        const uint8_t* grp = in + kQ6KCodesAt + uint64_t(j) * kQ6KGroupBytes;
        for (int k = 0; k < 4; ++k)
          for (int e = 0; e < 4; ++e) {
            const uint64_t at = q6_k_lane_byte(r, e);
            const int code =
                (grp[(k / 2) * 64 + at] >> 4 * (k % 2) & 0xF) | (grp[128 + at] >> 2 * k & 3) << 4;
            out[r * n + i * kQKK + 16 * j + 4 * k + e] = ds * float(code - 32);
          }
      }
    }
}

// Group j's four code vectors from its N0, N1, H (13 integer ops, no shuffles).
inline void q6_k_group_codes(const uint8_t* grp, __m512i (&c)[4]) {
  const __m512i low = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
  const __m512i n0 = _mm512_load_si512(grp), n1 = _mm512_load_si512(grp + 64);
  const __m512i h = _mm512_load_si512(grp + 128);
  // ternlog 0xF8: a | (b & c). The 16-bit shifts carry bits across bytes only where the masks
  // clear them.
  c[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(n0, low), _mm512_slli_epi16(h, 4), top, 0xF8);
  c[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(n0, 4), low),
                                   _mm512_slli_epi16(h, 2), top, 0xF8);
  c[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(n1, low), h, top, 0xF8);
  c[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(n1, 4), low),
                                   _mm512_srli_epi16(h, 2), top, 0xF8);
}

// Units are super-blocks (kQ6KSuperBytes). Per group of 16 values and token: 8 byte dot
// products and the recombination sum (c - 32) a = 256 (c.hi) + c.lo - 32 sum(a), exact in int32
// (|c.hi| <= 16 x 63 x 127, |sum(a)| <= 16 x 32639); per pair of groups (one activation
// block) one FMA into the super-block's sum, which takes the row's d once at its end.
template <int NT, int G>
void q6_k_streams(const uint8_t* w, uint64_t stride_bytes, int64_t stride_units, int64_t first,
                  int64_t supers, int64_t t0, __m512 (&out)[G][NT], int64_t n,
                  const PackedActivations& x) {
  // Wide tiles take the row's d into each pair's scale: a per-token super-block sum would not
  // fit the registers next to the pair's code vectors.
  constexpr bool kFoldD = NT > 4;
  const int64_t nb = n / kQK32;
  __m512 acc[G][NT];  // local, so the compiler keeps them in registers (out may alias)
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < supers; ++s) {
    for (int i = 0; i < G; ++i) {
      const uint8_t* wg = w + uint64_t(i) * stride_bytes + uint64_t(s) * kQ6KSuperBytes;
      const int64_t sb = first + i * stride_units + s;
      prefetch_ahead(wg, int(kQ6KSuperBytes));
      const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(wg));
      __m512 sum[kFoldD ? 1 : NT];
      for (__m512& v : sum) v = _mm512_setzero_ps();
      for (int p = 0; p < 8; ++p) {  // pairs of groups: one 32-element activation block each
        __m512i c[2][4];
        __m512 sc[2];
        for (int h = 0; h < 2; ++h) {
          const int j = 2 * p + h;
          q6_k_group_codes(wg + kQ6KCodesAt + uint64_t(j) * kQ6KGroupBytes, c[h]);
          sc[h] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
              _mm_load_si128(reinterpret_cast<const __m128i*>(wg + kQ6KScalesAt + 16 * j))));
        }
        for (int t = 0; t < NT; ++t) {
          const int8_t* lo = act_codes(x, t0 + t, n) + sb * kQKK + 32 * p;
          const int32_t* sums = act_sums(x, t0 + t, n) + sb * 16 + 2 * p;
          __m512 f[2];
          for (int h = 0; h < 2; ++h) {
            const auto* xl = reinterpret_cast<const int32_t*>(lo + 16 * h);
            const auto* xh = reinterpret_cast<const int32_t*>(lo + n + 16 * h);
            __m512i sl = _mm512_set1_epi32(sums[h]), sh = _mm512_setzero_si512();
            for (int k = 0; k < 4; ++k) {
              sl = dpbusd_bcast(sl, c[h][k], xl + k);
              sh = dpbusd_bcast(sh, c[h][k], xh + k);
            }
            f[h] = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(sh, 8), sl));
          }
          const __m512 u = _mm512_fmadd_ps(f[1], sc[1], _mm512_mul_ps(f[0], sc[0]));
          const __m512 xd = _mm512_set1_ps(x.d[(t0 + t) * nb + sb * 8 + p]);
          if constexpr (kFoldD)
            acc[i][t] = _mm512_fmadd_ps(u, _mm512_mul_ps(dw, xd), acc[i][t]);
          else
            sum[t] = _mm512_fmadd_ps(u, xd, sum[t]);
        }
      }
      if constexpr (!kFoldD)
        for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_fmadd_ps(sum[t], dw, acc[i][t]);
    }
  }
  for (int i = 0; i < G; ++i)
    for (int t = 0; t < NT; ++t) out[i][t] = acc[i][t];
}

void q6_k_gemm(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
               float* y, int64_t y_stride) {
  // Tiles of 8 tokens (a decode step of 8 sequences in one pass over the weights): a pair's 8
  // code vectors, 2 scale vectors and an accumulator a token stay in registers.
  gemm_streams<8>(w, g0, g1, n / kQKK, kQ6KSuperBytes, x.n_tokens, y, y_stride,
                  [&](auto tile, auto g, auto&&... span) {
                    q6_k_streams<decltype(tile)::value, decltype(g)::value>(span..., n, x);
                  });
}

}  // namespace

const PackedLayout q6_k_packed = {.version = 1,
                                  .group_rows = kRows,
                                  .can_pack = q6_k_can_pack,
                                  .bytes = q6_k_bytes,
                                  .pack = q6_k_pack,
                                  .gemm = q6_k_gemm,
                                  .quantize = quantize_i16_bytes,
                                  .act_type = DType::I16,
                                  .act_split_i16 = true,
                                  .unpack_rows = q6_k_unpack_rows};

}  // namespace hearth::kernels::avx512
