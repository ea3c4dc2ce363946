// AVX-512 inner loops of the small ops (SmallOps, cpu/small-ops.h): attention scores, softmax
// exponentials, P.V accumulation (f32 and typed f16/bf16/q8_0 cache rows), SwiGLU, RMSNorm, add.
// Compiled with AVX-512 flags; reached only through small_ops() after cpuid says yes. Tails use
// masked loads, so any length is exact.
#include <immintrin.h>

#include <type_traits>
#include <utility>

#include "kernels/cpu/arch/x86/row-loop-table.h"
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
// offset(i): where element i of a row starts (i % 32 == 0 for q8_0); kQ8: blocks of 32, so a
// row's vector count is even.
struct LoadF32 {
  static constexpr int64_t offset(int64_t i) { return 4 * i; }
  static constexpr bool kQ8 = false;
  __m512 operator()(const uint8_t* row, int64_t i) const {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
  }
};
struct LoadF16 {
  static constexpr int64_t offset(int64_t i) { return 2 * i; }
  static constexpr bool kQ8 = false;
  __m512 operator()(const uint8_t* row, int64_t i) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  }
};
struct LoadBF16 {
  static constexpr int64_t offset(int64_t i) { return 2 * i; }
  static constexpr bool kQ8 = false;
  __m512 operator()(const uint8_t* row, int64_t i) const {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct LoadQ8_0 {
  static constexpr int64_t offset(int64_t i) { return i / kQK32 * int64_t(sizeof(BlockQ8_0)); }
  static constexpr bool kQ8 = true;
  __m512 operator()(const uint8_t* row, int64_t i) const {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + i / kQK32;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + i % kQK32));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b->d)),
                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  }
};

// The row loops below are templates on C = hd / 16 (vectors per head row), dispatched once per
// call (kChunkTable, x86/row-loop-table.h). hearth-attention-bench on a Zen 5, f16 rows, with the
// group loops below: a 7B GQA layer's decode step 3.9 -> 2.7 ms, Gemma 2 9B's 2.8 -> 1.7 ms
// (performance.md).
constexpr int kMaxChunks = 16;  // head_dim 256 (Gemma); larger heads take the generic loops

// q8_0: a block's 32 values widened to f32 as integers; its scale applies to their products' sum.
inline __m512 widen_q8(const int8_t* qs) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs))));
}

// One row of C vectors widened to f32 in registers, so several query heads can share it (GQA).
template <class Load, int C>
struct WideRow {
  __m512 v[C];
  float d[(C + 1) / 2];  // q8_0: the scale of block b (v[2b], v[2b + 1] hold its integers)
  void read(const uint8_t* row) {
    if constexpr (Load::kQ8) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(row);
      for (int b = 0; b < C / 2; ++b, ++blk) {
        v[2 * b] = widen_q8(blk->qs);
        v[2 * b + 1] = widen_q8(blk->qs + 16);
        d[b] = _cvtsh_ss(blk->d);
      }
    } else {
      for (int c = 0; c < C; ++c) v[c] = Load{}(row, 16 * c);
    }
  }
  // 16 lanes whose sum is q . row. f16/bf16/f32: two chains (even and odd vectors); q8_0: a
  // block's 32 products summed before its one scale.
  __m512 dot(const float* q) const {
    if constexpr (Load::kQ8) {
      __m512 acc = _mm512_setzero_ps();
      for (int b = 0; b < C / 2; ++b) {
        const __m512 block = _mm512_fmadd_ps(_mm512_loadu_ps(q + 32 * b + 16), v[2 * b + 1],
                                             _mm512_mul_ps(_mm512_loadu_ps(q + 32 * b), v[2 * b]));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d[b]), block, acc);
      }
      return acc;
    } else if constexpr (C == 1) {
      return _mm512_mul_ps(_mm512_loadu_ps(q), v[0]);
    } else {
      __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), v[0]);
      __m512 b = _mm512_mul_ps(_mm512_loadu_ps(q + 16), v[1]);
      for (int c = 2; c < C; ++c) {
        __m512& acc = c % 2 == 0 ? a : b;
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c), v[c], acc);
      }
      return _mm512_add_ps(a, b);
    }
  }
};

template <int C, class Load>
inline __m512 partial_dot(const float* q, const uint8_t* row, Load) {
  WideRow<Load, C> w;
  w.read(row);
  return w.dot(q);
}

// s[j] = scale * q . row j, 16 keys reduced at once (sum_each_16).
template <class Load, int C>
void scores_c(const float* q, const uint8_t* kb, int64_t k_stride, int64_t nk, float scale,
              float* s) {
  const __m512 sv = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= nk; j += 16) {
    __m512 v[16];
    for (int i = 0; i < 16; ++i) v[i] = partial_dot<C>(q, kb + (j + i) * k_stride, Load{});
    _mm512_storeu_ps(s + j, _mm512_mul_ps(sum_each_16(v), sv));
  }
  for (; j < nk; ++j)
    s[j] = _mm512_reduce_add_ps(partial_dot<C>(q, kb + j * k_stride, Load{})) * scale;
}

// Scores of g heads sharing the rows: each row is widened once, every head's 16-key partials go
// to a scratch (the single-head loop spills them too) and are reduced per head.
template <class Load, int C>
void scores_group_c(const float* q, int64_t g, const uint8_t* kb, int64_t k_stride, int64_t nk,
                    float scale, float* s, int64_t s_stride) {
  constexpr int64_t kHeads = 8;  // heads a pass: their partials take 8 KiB of stack
  const __m512 sv = _mm512_set1_ps(scale);
  alignas(64) __m512 part[kHeads][16];
  for (int64_t h0 = 0; h0 < g; h0 += kHeads) {
    const int64_t gh = std::min(kHeads, g - h0);
    const float* qh = q + h0 * 16 * C;
    int64_t j = 0;
    for (; j + 16 <= nk; j += 16) {
      for (int i = 0; i < 16; ++i) {
        WideRow<Load, C> w;
        w.read(kb + (j + i) * k_stride);
        for (int64_t h = 0; h < gh; ++h) part[h][i] = w.dot(qh + h * 16 * C);
      }
      for (int64_t h = 0; h < gh; ++h)
        _mm512_storeu_ps(s + (h0 + h) * s_stride + j, _mm512_mul_ps(sum_each_16(part[h]), sv));
    }
    for (; j < nk; ++j) {
      WideRow<Load, C> w;
      w.read(kb + j * k_stride);
      for (int64_t h = 0; h < gh; ++h)
        s[(h0 + h) * s_stride + j] = _mm512_reduce_add_ps(w.dot(qh + h * 16 * C)) * scale;
    }
  }
}

// P.V of GH heads over CP vectors of the rows (columns from col): each vector is widened once
// for the GH heads' GH x CP accumulators, the keys in order into one accumulator a vector.
// Interleaving the keys over two sets of accumulators (8 chains for one head of 64) was no
// faster (the f16 widening bounds these loops) and made the rounding depend on where a call's
// keys start, which let a served stream's greedy tokens differ from its run alone (the
// scheduler golden test failed 8 runs in 40).
template <class Load, int GH, int CP>
void accumulate_heads(float* acc, int64_t hd, const float* c, const float* p, int64_t p_stride,
                      const uint8_t* vb, int64_t v_stride, int64_t nk, int64_t col) {
  __m512 a[GH][CP];
  for (int h = 0; h < GH; ++h)
    for (int r = 0; r < CP; ++r)
      a[h][r] = _mm512_mul_ps(_mm512_set1_ps(c[h]), _mm512_loadu_ps(acc + h * hd + col + 16 * r));
  for (int64_t j = 0; j < nk; ++j) {
    WideRow<Load, CP> w;
    w.read(vb + j * v_stride + Load::offset(col));
    for (int h = 0; h < GH; ++h) {
      const float pj = p[h * p_stride + j];
      for (int r = 0; r < CP; ++r) {
        const float scale = Load::kQ8 ? pj * w.d[r / 2] : pj;
        a[h][r] = _mm512_fmadd_ps(_mm512_set1_ps(scale), w.v[r], a[h][r]);
      }
    }
  }
  for (int h = 0; h < GH; ++h)
    for (int r = 0; r < CP; ++r) _mm512_storeu_ps(acc + h * hd + col + 16 * r, a[h][r]);
}

// One head's whole row in passes of at most 8 vectors (q8_0 rows: 8, so a pass starts on a block).
template <class Load, int C>
void accumulate_row(float* acc, float c, const float* p, const uint8_t* vb, int64_t v_stride,
                    int64_t nk) {
  constexpr int kPass = C < 8 ? C : 8;
  accumulate_heads<Load, 1, kPass>(acc, 16 * C, &c, p, 0, vb, v_stride, nk, 0);
  if constexpr (C > 8)
    accumulate_row<Load, C - 8>(acc + 128, c, p, vb + Load::offset(128), v_stride, nk);
}

// 2-4 heads, columns in passes of 4 vectors: up to 16 accumulators, each over the keys in order.
template <class Load, int GH>
void accumulate_head_group(float* acc, int64_t hd, const float* c, const float* p, int64_t p_stride,
                           const uint8_t* vb, int64_t v_stride, int64_t nk) {
  int64_t col = 0;
  for (; col + 64 <= hd; col += 64)
    accumulate_heads<Load, GH, 4>(acc, hd, c, p, p_stride, vb, v_stride, nk, col);
  const int64_t left = (hd - col) / 16;  // q8_0: hd % 32 == 0, so 0 or 2
  if (left == 2)
    return accumulate_heads<Load, GH, 2>(acc, hd, c, p, p_stride, vb, v_stride, nk, col);
  if constexpr (!Load::kQ8) {
    if (left == 1) accumulate_heads<Load, GH, 1>(acc, hd, c, p, p_stride, vb, v_stride, nk, col);
    if (left == 3) accumulate_heads<Load, GH, 3>(acc, hd, c, p, p_stride, vb, v_stride, nk, col);
  }
}

// Two to four heads from `acc` (rows hd apart) through accumulate_head_group.
template <class Load>
void accumulate_heads_of(int64_t n, float* acc, int64_t hd, const float* c, const float* p,
                         int64_t p_stride, const uint8_t* vb, int64_t v_stride, int64_t nk) {
  switch (n) {
    case 2:
      return accumulate_head_group<Load, 2>(acc, hd, c, p, p_stride, vb, v_stride, nk);
    case 3:
      return accumulate_head_group<Load, 3>(acc, hd, c, p, p_stride, vb, v_stride, nk);
    default:
      return accumulate_head_group<Load, 4>(acc, hd, c, p, p_stride, vb, v_stride, nk);
  }
}

template <class Load, int C>
struct RowLoops {
  static constexpr bool kValid = !Load::kQ8 || C % 2 == 0;
  static constexpr auto scores() { return scores_c<Load, C>; }
  static constexpr auto accumulate() { return accumulate_row<Load, C>; }
  static constexpr auto scores_group() { return scores_group_c<Load, C>; }
};
template <class Load>
constexpr x86::RowLoopTable<RowLoops, Load, kMaxChunks> kChunkTable{};

// The generic loops: any hd % 16 == 0 (q8_0: % 32), no unrolling.
template <class Load>
__m512 partial_dot_any(const float* q, const uint8_t* row, int64_t hd) {
  __m512 a = _mm512_setzero_ps();
  for (int64_t i = 0; i < hd; i += 16)
    a = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), Load{}(row, i), a);
  return a;
}

template <class Load, KvRowFn Fallback>
void scores_typed(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                  float scale, float* s) {
  if (hd % 16 != 0) return Fallback(q, k, k_stride, nk, hd, scale, s);
  const auto* kb = static_cast<const uint8_t*>(k);
  if (const auto loop = kChunkTable<Load>.scores_for(hd, 16))
    return loop(q, kb, k_stride, nk, scale, s);
  for (int64_t j = 0; j < nk; ++j)
    s[j] = _mm512_reduce_add_ps(partial_dot_any<Load>(q, kb + j * k_stride, hd)) * scale;
}

template <class Load, KvAccFn Fallback>
void accumulate_typed(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                      int64_t nk, int64_t hd) {
  if (hd % 16 != 0) return Fallback(acc, c, p, v, v_stride, nk, hd);
  const auto* vb = static_cast<const uint8_t*>(v);
  if (const auto loop = kChunkTable<Load>.accumulate_for(hd, 16))
    return loop(acc, c, p, vb, v_stride, nk);
  for (int64_t i = 0; i < hd; i += 16) {
    __m512 a = _mm512_mul_ps(_mm512_set1_ps(c), _mm512_loadu_ps(acc + i));
    for (int64_t j = 0; j < nk; ++j)
      a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), Load{}(vb + j * v_stride, i), a);
    _mm512_storeu_ps(acc + i, a);
  }
}

// The group entries (KvRowOps::scores_group, accumulate_group); other head sizes loop the
// per-head entries.
template <class Load, KvRowFn PerHead>
void scores_group_typed(const float* q, int64_t g, const void* k, int64_t k_stride, int64_t nk,
                        int64_t hd, float scale, float* s, int64_t s_stride) {
  const auto* kb = static_cast<const uint8_t*>(k);
  if (const auto loop = kChunkTable<Load>.scores_group_for(hd, 16))
    return loop(q, g, kb, k_stride, nk, scale, s, s_stride);
  for (int64_t h = 0; h < g; ++h) PerHead(q + h * hd, k, k_stride, nk, hd, scale, s + h * s_stride);
}

template <class Load, KvAccFn PerHead>
void accumulate_group_typed(float* acc, const float* c, const float* p, int64_t p_stride, int64_t g,
                            const void* v, int64_t v_stride, int64_t nk, int64_t hd) {
  int64_t h = 0;
  if (hd % 16 == 0 && (!Load::kQ8 || hd % 32 == 0))
    while (g - h >= 2) {  // chunks of 2-4 heads
      const int64_t n = std::min<int64_t>(4, g - h);
      accumulate_heads_of<Load>(n, acc + h * hd, hd, c + h, p + h * p_stride, p_stride,
                                static_cast<const uint8_t*>(v), v_stride, nk);
      h += n;
    }
  for (; h < g; ++h)  // a last single head, or other head sizes
    PerHead(acc + h * hd, c[h], p + h * p_stride, v, v_stride, nk, hd);
}

template <class Load, KvRowFn ScoresFallback, KvAccFn AccFallback>
constexpr KvRowOps kRowOps{scores_typed<Load, ScoresFallback>, accumulate_typed<Load, AccFallback>,
                           nullptr, scores_group_typed<Load, scores_typed<Load, ScoresFallback>>,
                           accumulate_group_typed<Load, accumulate_typed<Load, AccFallback>>};

// f32 rows: whole vectors through the typed templates (element strides as bytes); other head
// sizes by masked tails. Decode attention costs about as much from cache as from memory
// (session 13), and one horizontal reduction per key was the largest part of it: 16 keys are
// reduced at once (sum_each_16).
void scores(const float* q, const float* k, int64_t k_stride, int64_t nk, int64_t hd, float scale,
            float* s) {
  if (const auto loop = kChunkTable<LoadF32>.scores_for(hd, 16))
    return loop(q, reinterpret_cast<const uint8_t*>(k), k_stride * 4, nk, scale, s);
  for (int64_t j = 0; j < nk; ++j) s[j] = dot(q, k + j * k_stride, hd) * scale;
}

void accumulate(float* acc, float c, const float* p, const float* v, int64_t v_stride, int64_t nk,
                int64_t hd) {
  if (const auto loop = kChunkTable<LoadF32>.accumulate_for(hd, 16))
    return loop(acc, c, p, reinterpret_cast<const uint8_t*>(v), v_stride * 4, nk);
  const __m512 cv = _mm512_set1_ps(c);
  for (int64_t i = 0; i < hd; i += 16) {
    const __mmask16 m = tail_mask(hd - i);
    __m512 a = _mm512_mul_ps(cv, _mm512_maskz_loadu_ps(m, acc + i));
    for (int64_t j = 0; j < nk; ++j)
      a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_maskz_loadu_ps(m, v + j * v_stride + i), a);
    _mm512_mask_storeu_ps(acc + i, m, a);
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

// constinit: built by the compiler, so no code compiled with this file's flags runs at startup
// (where the CPU may lack them).
constinit const SmallOps small_ops{
    "avx512",
    scores,
    exp_sum,
    accumulate,
    swiglu,
    sum_squares,
    scale_mul,
    add,
    [] {
      KvRowOps ops = kRowOps<LoadF16, portable::scores_f16, portable::accumulate_f16>;
      ops.store = store_f16;
      return ops;
    }(),
    kRowOps<LoadBF16, portable::scores_bf16, portable::accumulate_bf16>,
    kRowOps<LoadQ8_0, portable::scores_q8_0, portable::accumulate_q8_0>};

}  // namespace hearth::kernels::avx512
