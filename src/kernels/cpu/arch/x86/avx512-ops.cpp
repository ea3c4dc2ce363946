// AVX-512 inner loops of the small ops (SmallOps, cpu/small-ops.h): attention scores, softmax
// exponentials, P.V accumulation (f32 and typed f16/bf16/q8_0 cache rows), SwiGLU, RMSNorm, add.
// Compiled with AVX-512 flags; reached only through small_ops() after cpuid says yes. Tails use
// masked loads, so any length is exact.
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/small-ops.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::avx512 {

namespace {

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
}

// e^x for 16 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial (relative error
// ~2e-7, about 2 ulp), times 2^n via scalef. Below -87 the result is 0: e^x would be within
// 1.7e-38 of 0 and turn denormal below -87.34, and every denormal result costs a microcode
// assist. Those are common, not rare: softmax meets them whenever a score trails the row's
// maximum by 87, and silu(x) for x > 87. In a 1B Q4_K decode (random weights), swiglu and
// exp_sum took 1.6% of all samples with denormals and 0.15% flushed (perf, tg256; the pool's
// wait on them fell from 4.1% to 2.3%). The caller's MXCSR (FTZ/DAZ) is left alone: it
// belongs to the application. Above 88.7 the result saturates at FLT_MAX instead of inf,
// which keeps silu(x) = x / (1 + e^-x) finite and exact enough (x / 3.4e38 ~ 0) for x << 0.
inline __m512 exp512(__m512 x) {
  const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.72f)), _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2 split hi + lo
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(normal, p, n);
}

// One dot product of hd floats (masked tail).
inline float dot(const float* a, const float* b, int64_t hd) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= hd; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < hd; i += 16) {
    const __mmask16 m = tail_mask(hd - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// 16 vectors in, one out: lane j = the sum of v[j]'s 16 lanes. A tree of in-lane unpacks and
// cross-lane shuffles: 45 uops for 16 sums, where 16 separate reductions cost ~130.
inline __m512 sum_each_16(const __m512 (&v)[16]) {
  __m512 a[8], b[4];
  for (int j = 0; j < 8; ++j)  // per 128-bit lane: [v2j even, v2j+1 even, v2j odd, v2j+1 odd]
    a[j] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * j], v[2 * j + 1]),
                         _mm512_unpackhi_ps(v[2 * j], v[2 * j + 1]));
  for (int j = 0; j < 4; ++j) {  // per 128-bit lane: the lane's sums of keys 4j .. 4j+3
    const __m512d x = _mm512_castps_pd(a[2 * j]), y = _mm512_castps_pd(a[2 * j + 1]);
    b[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  // Fold the four 128-bit lanes: d0 = [b0 L0+L1, b0 L2+L3, b1 L0+L1, b1 L2+L3], d1 likewise.
  const __m512 d0 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 d1 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(b[2], b[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(d0, d1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Decode attention costs about as much from cache as from memory (session 13: TinyLlama's 22
// layers at 250 positions, 1.0 ms a step from cache, 1.5 ms cold), and one horizontal reduction
// per key was the largest part of it: the common head size now reduces 16 keys at once (64
// keys from L1: 2.3 -> 1.6 ns a key). Only the summation order changes.
void scores(const float* q, const float* k, int64_t k_stride, int64_t nk, int64_t hd, float scale,
            float* s) {
  if (hd == 64) {  // the common head size: q stays in four registers across all keys
    const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16);
    const __m512 q2 = _mm512_loadu_ps(q + 32), q3 = _mm512_loadu_ps(q + 48);
    const __m512 sv = _mm512_set1_ps(scale);
    auto partial = [&](const float* kj) {  // 16 lanes whose sum is q . k_j
      const __m512 a =
          _mm512_fmadd_ps(q2, _mm512_loadu_ps(kj + 32), _mm512_mul_ps(q0, _mm512_loadu_ps(kj)));
      const __m512 b = _mm512_fmadd_ps(q3, _mm512_loadu_ps(kj + 48),
                                       _mm512_mul_ps(q1, _mm512_loadu_ps(kj + 16)));
      return _mm512_add_ps(a, b);
    };
    int64_t j = 0;
    for (; j + 16 <= nk; j += 16) {
      __m512 v[16];
      for (int i = 0; i < 16; ++i) v[i] = partial(k + (j + i) * k_stride);
      _mm512_storeu_ps(s + j, _mm512_mul_ps(sum_each_16(v), sv));
    }
    for (; j < nk; ++j) s[j] = _mm512_reduce_add_ps(partial(k + j * k_stride)) * scale;
    return;
  }
  for (int64_t j = 0; j < nk; ++j) s[j] = dot(q, k + j * k_stride, hd) * scale;
}

float exp_sum(float* s, int64_t n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 mk = tail_mask(n - j);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, s + j), mv));
    _mm512_mask_storeu_ps(s + j, mk, e);
    sum = _mm512_mask_add_ps(sum, mk, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// acc row of hd floats kept in registers while the keys stream by, 64 columns at a time.
void accumulate(float* acc, float c, const float* p, const float* v, int64_t v_stride, int64_t nk,
                int64_t hd) {
  const __m512 cv = _mm512_set1_ps(c);
  // The common head size with plain loads: a masked load costs a uop on the port the FMAs
  // use too (64 keys from L1: 2.0-2.6 -> 1.6 ns a key).
  if (hd == 64) {
    __m512 a[4];
    for (int r = 0; r < 4; ++r) a[r] = _mm512_mul_ps(cv, _mm512_loadu_ps(acc + 16 * r));
    for (int64_t j = 0; j < nk; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const float* vj = v + j * v_stride;
      for (int r = 0; r < 4; ++r) a[r] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16 * r), a[r]);
    }
    for (int r = 0; r < 4; ++r) _mm512_storeu_ps(acc + 16 * r, a[r]);
    return;
  }
  for (int64_t i = 0; i < hd; i += 64) {
    const int64_t w = hd - i;
    const __mmask16 m0 = tail_mask(w), m1 = tail_mask(w - 16 > 0 ? w - 16 : 0);
    const __mmask16 m2 = tail_mask(w - 32 > 0 ? w - 32 : 0);
    const __mmask16 m3 = tail_mask(w - 48 > 0 ? w - 48 : 0);
    __m512 a0 = _mm512_mul_ps(cv, _mm512_maskz_loadu_ps(m0, acc + i));
    __m512 a1 = _mm512_mul_ps(cv, _mm512_maskz_loadu_ps(m1, acc + i + 16));
    __m512 a2 = _mm512_mul_ps(cv, _mm512_maskz_loadu_ps(m2, acc + i + 32));
    __m512 a3 = _mm512_mul_ps(cv, _mm512_maskz_loadu_ps(m3, acc + i + 48));
    const float* vi = v + i;
    for (int64_t j = 0; j < nk; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const float* vj = vi + j * v_stride;
      a0 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m0, vj), a0);
      a1 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m1, vj + 16), a1);
      a2 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m2, vj + 32), a2);
      a3 = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m3, vj + 48), a3);
    }
    _mm512_mask_storeu_ps(acc + i, m0, a0);
    _mm512_mask_storeu_ps(acc + i + 16, m1, a1);
    _mm512_mask_storeu_ps(acc + i + 32, m2, a2);
    _mm512_mask_storeu_ps(acc + i + 48, m3, a3);
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, u));
  }
}

double sum_squares(const float* x, int64_t n) {
  __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    a = _mm512_fmadd_pd(lo, lo, a);
    b = _mm512_fmadd_pd(hi, hi, b);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(a, b));
}

void scale_mul(const float* x, float s, const float* w, float* y, int64_t n) {
  const __m512 sv = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v =
        _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

// ---- Typed KV cache rows (KvRowOps): f16, bf16 and q8_0 rows read in place ----
// Each loader returns elements [i, i + 16) of a row as f32 (i % 16 == 0): f16 through the F16C
// conversion, bf16 by a shift (exact; AVX512-BF16's dot product would round q to bf16 too),
// q8_0 as d * q of its block. Head sizes that are not whole vectors go to the portable loops.
struct LoadF16 {
  __m512 operator()(const uint8_t* row, int64_t i) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  }
};
struct LoadBF16 {
  __m512 operator()(const uint8_t* row, int64_t i) const {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct LoadQ8_0 {
  __m512 operator()(const uint8_t* row, int64_t i) const {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + i / kQK32;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + i % kQK32));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b->d)),
                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
};

// 16 lanes whose sum is q . row (hd % 16 == 0).
template <class Load>
inline __m512 partial_dot(const float* q, const uint8_t* row, int64_t hd, Load load) {
  __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), load(row, 0)), b = _mm512_setzero_ps();
  int64_t i = 16;
  for (; i + 32 <= hd; i += 32) {
    b = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load(row, i), b);
    a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), load(row, i + 16), a);
  }
  if (i < hd) b = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load(row, i), b);
  return _mm512_add_ps(a, b);
}

// q8_0: a block's 32 products summed before its one scale (instead of scaling every value).
inline __m512 widen_q8(const int8_t* qs) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs))));
}
inline __m512 partial_dot(const float* q, const uint8_t* row, int64_t hd, LoadQ8_0) {
  const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < hd; i += kQK32, ++b) {
    const __m512 block = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), widen_q8(b->qs + 16),
                                         _mm512_mul_ps(_mm512_loadu_ps(q + i), widen_q8(b->qs)));
    acc = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(b->d)), block, acc);
  }
  return acc;
}

// As scores: 16 keys reduced at once (sum_each_16).
template <class Load, KvRowFn Fallback>
void scores_typed(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                  float scale, float* s) {
  if (hd % 16 != 0) return Fallback(q, k, k_stride, nk, hd, scale, s);
  const auto* kb = static_cast<const uint8_t*>(k);
  const __m512 sv = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= nk; j += 16) {
    __m512 v[16];
    for (int i = 0; i < 16; ++i) v[i] = partial_dot(q, kb + (j + i) * k_stride, hd, Load{});
    _mm512_storeu_ps(s + j, _mm512_mul_ps(sum_each_16(v), sv));
  }
  for (; j < nk; ++j)
    s[j] = _mm512_reduce_add_ps(partial_dot(q, kb + j * k_stride, hd, Load{})) * scale;
}

// As accumulate: 64 columns of acc in registers while the rows stream by (hd % 16 == 0).
template <class Load, KvAccFn Fallback>
void accumulate_typed(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                      int64_t nk, int64_t hd) {
  if (hd % 16 != 0) return Fallback(acc, c, p, v, v_stride, nk, hd);
  const auto* vb = static_cast<const uint8_t*>(v);
  const __m512 cv = _mm512_set1_ps(c);
  const Load load;
  int64_t i = 0;
  for (; i + 64 <= hd; i += 64) {
    __m512 a[4];
    for (int r = 0; r < 4; ++r) a[r] = _mm512_mul_ps(cv, _mm512_loadu_ps(acc + i + 16 * r));
    for (int64_t j = 0; j < nk; ++j) {
      const uint8_t* row = vb + j * v_stride;
      if constexpr (std::is_same_v<Load, LoadQ8_0>) {  // p[j] and the block scale folded once
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + i / kQK32;
        for (int b = 0; b < 2; ++b) {
          const __m512 w = _mm512_set1_ps(p[j] * _cvtsh_ss(blk[b].d));
          a[2 * b] = _mm512_fmadd_ps(w, widen_q8(blk[b].qs), a[2 * b]);
          a[2 * b + 1] = _mm512_fmadd_ps(w, widen_q8(blk[b].qs + 16), a[2 * b + 1]);
        }
      } else {
        const __m512 pj = _mm512_set1_ps(p[j]);
        for (int r = 0; r < 4; ++r) a[r] = _mm512_fmadd_ps(pj, load(row, i + 16 * r), a[r]);
      }
    }
    for (int r = 0; r < 4; ++r) _mm512_storeu_ps(acc + i + 16 * r, a[r]);
  }
  for (; i < hd; i += 16) {  // 16, 32 or 48 columns left
    __m512 a = _mm512_mul_ps(cv, _mm512_loadu_ps(acc + i));
    for (int64_t j = 0; j < nk; ++j)
      a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), load(vb + j * v_stride, i), a);
    _mm512_storeu_ps(acc + i, a);
  }
}

// f32 -> f16 rows, rounding to nearest even like ref::quantize_f16; a NaN becomes the
// reference's quiet NaN (the instruction would keep its payload). Masked tail.
void store_f16(const float* x, void* row, int64_t n) {
  auto* y = static_cast<uint16_t*>(row);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan) {
      const __m256i sign = _mm256_and_si256(h, _mm256_set1_epi16(int16_t(0x8000)));
      h = _mm256_mask_mov_epi16(h, nan, _mm256_or_si256(sign, _mm256_set1_epi16(0x7e00)));
    }
    _mm256_mask_storeu_epi16(y + i, m, h);
  }
}

}  // namespace

const SmallOps small_ops{"avx512",
                         scores,
                         exp_sum,
                         accumulate,
                         swiglu,
                         sum_squares,
                         scale_mul,
                         add,
                         {scores_typed<LoadF16, portable::scores_f16>,
                          accumulate_typed<LoadF16, portable::accumulate_f16>, store_f16},
                         {scores_typed<LoadBF16, portable::scores_bf16>,
                          accumulate_typed<LoadBF16, portable::accumulate_bf16>},
                         {scores_typed<LoadQ8_0, portable::scores_q8_0>,
                          accumulate_typed<LoadQ8_0, portable::accumulate_q8_0>}};

}  // namespace hearth::kernels::avx512
