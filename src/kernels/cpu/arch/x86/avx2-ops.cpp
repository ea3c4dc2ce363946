// AVX2 + FMA + F16C inner loops of the small ops (SmallOps, cpu/small-ops.h): attention over
// typed KV cache rows (f16 through the F16C conversion, bf16 by a shift, q8_0 as d * q of each
// block; per head, and per group of query heads sharing a kv head), the softmax exponentials and
// SwiGLU; the avx2 table at the end pairs them with the portable f32 loops. Compiled with AVX2
// flags; reached only after cpuid says yes. Head sizes that are not whole vectors of 8 go to the
// portable loops.
#include <immintrin.h>

#include <algorithm>

#include <type_traits>
#include <utility>

#include "kernels/cpu/arch/x86/row-loop-table.h"
#include "kernels/cpu/arch/x86/x86-simd-helpers.h"
#include "kernels/cpu/small-ops.h"
#include "kernels/quant-blocks.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels::avx2 {

namespace {

// Elements [i, i + 8) of a row as f32 (i % 8 == 0).
struct LoadF16 {
  static constexpr DType kRows = DType::F16;
  __m256 operator()(const uint8_t* row, int64_t i) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  }
};
struct LoadBF16 {
  static constexpr DType kRows = DType::BF16;
  __m256 operator()(const uint8_t* row, int64_t i) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};
struct LoadQ8_0 {
  static constexpr DType kRows = DType::Q8_0;
  __m256 operator()(const uint8_t* row, int64_t i) const {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + i / kQK32;
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + i % kQK32));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)),
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
};

inline __m256 widen_q8(const int8_t* qs) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs))));
}

using x86::hsum;

// e^x for 8 lanes, as exp512 in the AVX-512 file (degree-6 polynomial, ~2 ulp; 0 below -87,
// so no result is denormal), with 2^n built in the exponent bits: x is capped at 88.3 so n stays
// <= 127 (e^88.3 ~ 2.1e38, finite, which keeps silu(x) = x / (1 + e^-x) exact enough for
// x << 0). The portable loop's libm expf per element was a third of a decode step's attention.
inline __m256 exp256(__m256 x) {
  const __m256 normal = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 split hi + lo
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), normal);
}

// Lanes [0, left) of a vector: the tails' masked loads and stores.
inline __m256i lanes(int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(std::min<int64_t>(left, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

float exp_sum(float* s, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 8) {
    const __m256i mk = lanes(n - j);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_maskload_ps(s + j, mk), mv));
    _mm256_maskstore_ps(s + j, mk, e);
    sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(mk)));
  }
  return hsum(sum);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i mk = lanes(n - i);
    const __m256 g = _mm256_maskload_ps(gate + i, mk);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_maskstore_ps(out + i, mk, _mm256_mul_ps(silu, _mm256_maskload_ps(up + i, mk)));
  }
}

// The row loops are templates on C = hd / 8 (vectors per head row), dispatched once per call
// (kChunkTable, x86/row-loop-table.h), as in the AVX-512 file: a row is straight-line code and 8
// keys are reduced at once.
constexpr int kMaxChunks = 32;  // head_dim 256; larger heads take the generic loops

// 8 vectors in, one out: lane j = the sum of v[j]'s 8 lanes.
inline __m256 sum_each_8(const __m256 (&v)[8]) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  // a: [v0..v3 low halves | v0..v3 high halves], b likewise for v4..v7.
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// Grouped-query attention: the g query heads of one kv head read each row once. With 16
// registers a widened row does not fit beside the accumulators (the AVX-512 file keeps one
// whole), so each 8-element piece is widened once and used at once by every head of a pass of
// up to kGroupHeads. One head is the per-head loop (GH = 1), so the group loops give the
// per-head loops' bits.
constexpr int kGroupHeads = 4;
template <class Load>
constexpr bool kQ8 = std::is_same_v<Load, LoadQ8_0>;

// The GH heads' 8-lane partial dots with one row (q: GH rows of 8 C floats): per head two
// chains, even and odd vectors; q8_0 rows one chain of block sums, each block's 32 products
// summed before its one scale.
template <class Load, int C, int GH>
inline void group_dots(const float* q, const uint8_t* row, __m256 (&out)[GH]) {
  if constexpr (kQ8<Load>) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row);
    for (int h = 0; h < GH; ++h) out[h] = _mm256_setzero_ps();
    for (int b = 0; b < C / 4; ++b, ++blk) {
      __m256 w[4];
      for (int i = 0; i < 4; ++i) w[i] = widen_q8(blk->qs + 8 * i);
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(blk->d));
      for (int h = 0; h < GH; ++h) {
        const float* qb = q + h * 8 * C + kQK32 * b;
        __m256 sum = _mm256_mul_ps(_mm256_loadu_ps(qb), w[0]);
        for (int i = 1; i < 4; ++i) sum = _mm256_fmadd_ps(_mm256_loadu_ps(qb + 8 * i), w[i], sum);
        out[h] = _mm256_fmadd_ps(d, sum, out[h]);
      }
    }
  } else {
    // Stepping by two, so a and b stay registers where the loop is not unrolled (a reference
    // chosen by c % 2 kept them in memory: head size 256 ran 5x slower than two heads of 128).
    __m256 a[GH], b[GH];
    const __m256 w0 = Load{}(row, 0);
    for (int h = 0; h < GH; ++h) a[h] = _mm256_mul_ps(_mm256_loadu_ps(q + h * 8 * C), w0);
    if constexpr (C > 1) {
      const __m256 w1 = Load{}(row, 8);
      for (int h = 0; h < GH; ++h) b[h] = _mm256_mul_ps(_mm256_loadu_ps(q + h * 8 * C + 8), w1);
    }
    for (int c = 2; c + 1 < C; c += 2) {
      const __m256 we = Load{}(row, 8 * c), wo = Load{}(row, 8 * c + 8);
      for (int h = 0; h < GH; ++h) {
        a[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * 8 * C + 8 * c), we, a[h]);
        b[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * 8 * C + 8 * c + 8), wo, b[h]);
      }
    }
    if constexpr (C > 2 && C % 2 == 1) {
      const __m256 w = Load{}(row, 8 * (C - 1));
      for (int h = 0; h < GH; ++h)
        a[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * 8 * C + 8 * (C - 1)), w, a[h]);
    }
    for (int h = 0; h < GH; ++h) out[h] = C == 1 ? a[h] : _mm256_add_ps(a[h], b[h]);
  }
}

// 8 lanes whose sum is q . row: one head's group_dots.
template <int C, class Load>
inline __m256 partial_dot(const float* q, const uint8_t* row, Load) {
  __m256 out[1];
  group_dots<Load, C, 1>(q, row, out);
  return out[0];
}

template <class Load, int C>
void scores_c(const float* q, const uint8_t* kb, int64_t k_stride, int64_t nk, float scale,
              float* s) {
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= nk; j += 8) {
    __m256 v[8];
    for (int i = 0; i < 8; ++i) v[i] = partial_dot<C>(q, kb + (j + i) * k_stride, Load{});
    _mm256_storeu_ps(s + j, _mm256_mul_ps(sum_each_8(v), sv));
  }
  for (; j < nk; ++j) s[j] = hsum(partial_dot<C>(q, kb + j * k_stride, Load{})) * scale;
}

// scores_c for GH heads (s: GH rows s_stride apart).
template <class Load, int C, int GH>
void scores_heads(const float* q, const uint8_t* kb, int64_t k_stride, int64_t nk, float scale,
                  float* s, int64_t s_stride) {
  const __m256 sv = _mm256_set1_ps(scale);
  __m256 part[GH][8];
  int64_t j = 0;
  for (; j + 8 <= nk; j += 8) {
    for (int i = 0; i < 8; ++i) {
      __m256 d[GH];
      group_dots<Load, C, GH>(q, kb + (j + i) * k_stride, d);
      for (int h = 0; h < GH; ++h) part[h][i] = d[h];
    }
    for (int h = 0; h < GH; ++h)
      _mm256_storeu_ps(s + h * s_stride + j, _mm256_mul_ps(sum_each_8(part[h]), sv));
  }
  for (; j < nk; ++j) {
    __m256 d[GH];
    group_dots<Load, C, GH>(q, kb + j * k_stride, d);
    for (int h = 0; h < GH; ++h) s[h * s_stride + j] = hsum(d[h]) * scale;
  }
}

template <class Load, int C>
void scores_group_c(const float* q, int64_t g, const uint8_t* kb, int64_t k_stride, int64_t nk,
                    float scale, float* s, int64_t s_stride) {
  for (int64_t h0 = 0; h0 < g; h0 += kGroupHeads) {
    const float* qh = q + h0 * 8 * C;
    float* sh = s + h0 * s_stride;
    switch (std::min<int64_t>(kGroupHeads, g - h0)) {
      case 1:
        scores_c<Load, C>(qh, kb, k_stride, nk, scale, sh);
        break;
      case 2:
        scores_heads<Load, C, 2>(qh, kb, k_stride, nk, scale, sh, s_stride);
        break;
      case 3:
        scores_heads<Load, C, 3>(qh, kb, k_stride, nk, scale, sh, s_stride);
        break;
      default:
        scores_heads<Load, C, 4>(qh, kb, k_stride, nk, scale, sh, s_stride);
    }
  }
}

// P.V of GH heads (acc: GH rows of 8 C floats) over CP vectors of the rows from vector v0: each
// vector is widened once for the GH heads' accumulators (GH x CP of them, plus a weight a head:
// at most 13 registers for the shapes below).
template <class Load, int C, int GH, int CP>
void accumulate_heads(float* acc, const float* c, const float* p, int64_t p_stride,
                      const uint8_t* vb, int64_t v_stride, int64_t nk, int v0) {
  __m256 a[GH][CP];
  for (int h = 0; h < GH; ++h)
    for (int r = 0; r < CP; ++r)
      a[h][r] =
          _mm256_mul_ps(_mm256_set1_ps(c[h]), _mm256_loadu_ps(acc + h * 8 * C + 8 * (v0 + r)));
  for (int64_t j = 0; j < nk; ++j) {
    const uint8_t* row = vb + j * v_stride;
    if constexpr (kQ8<Load>) {  // p[j] and the block scale folded
      for (int r = 0; r < CP; ++r) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + (v0 + r) / 4;
        const float d = _cvtsh_ss(blk->d);
        const __m256 v = widen_q8(blk->qs + 8 * ((v0 + r) % 4));
        for (int h = 0; h < GH; ++h)
          a[h][r] = _mm256_fmadd_ps(_mm256_set1_ps(p[h * p_stride + j] * d), v, a[h][r]);
      }
    } else {
      __m256 w[GH];
      for (int h = 0; h < GH; ++h) w[h] = _mm256_set1_ps(p[h * p_stride + j]);
      for (int r = 0; r < CP; ++r) {
        const __m256 v = Load{}(row, 8 * (v0 + r));
        for (int h = 0; h < GH; ++h) a[h][r] = _mm256_fmadd_ps(w[h], v, a[h][r]);
      }
    }
  }
  for (int h = 0; h < GH; ++h)
    for (int r = 0; r < CP; ++r) _mm256_storeu_ps(acc + h * 8 * C + 8 * (v0 + r), a[h][r]);
}

// GH heads' whole rows in column passes of CP vectors (and the C % CP left).
template <class Load, int C, int GH, int CP>
void accumulate_passes(float* acc, const float* c, const float* p, int64_t p_stride,
                       const uint8_t* vb, int64_t v_stride, int64_t nk) {
  int v0 = 0;
  for (; v0 + CP <= C; v0 += CP)
    accumulate_heads<Load, C, GH, CP>(acc, c, p, p_stride, vb, v_stride, nk, v0);
  if constexpr (C % CP != 0)
    accumulate_heads<Load, C, GH, C % CP>(acc, c, p, p_stride, vb, v_stride, nk, v0);
}

// One head's whole row in passes of at most 8 vectors.
template <class Load, int C>
void accumulate_row(float* acc, float c, const float* p, const uint8_t* vb, int64_t v_stride,
                    int64_t nk) {
  accumulate_passes<Load, C, 1, (C < 8 ? C : 8)>(acc, &c, p, 0, vb, v_stride, nk);
}

// Heads in chunks of 2-4 (8, 9 or 6 accumulators), a last single head by accumulate_row.
template <class Load, int C>
void accumulate_group_c(float* acc, const float* c, const float* p, int64_t p_stride, int64_t g,
                        const uint8_t* vb, int64_t v_stride, int64_t nk) {
  int64_t h = 0;
  for (; g - h >= 2; h += std::min<int64_t>(kGroupHeads, g - h)) {
    float* ah = acc + h * 8 * C;
    const float* ph = p + h * p_stride;
    switch (std::min<int64_t>(kGroupHeads, g - h)) {
      case 2:
        accumulate_passes<Load, C, 2, 4>(ah, c + h, ph, p_stride, vb, v_stride, nk);
        break;
      case 3:
        accumulate_passes<Load, C, 3, 3>(ah, c + h, ph, p_stride, vb, v_stride, nk);
        break;
      default:
        accumulate_passes<Load, C, 4, 2>(ah, c + h, ph, p_stride, vb, v_stride, nk);
    }
  }
  if (h < g) accumulate_row<Load, C>(acc + h * 8 * C, c[h], p + h * p_stride, vb, v_stride, nk);
}

// The group loops for the common head sizes (32, 64, 96, 128, 256; others loop the per-head
// ones): every C would multiply this file's instantiations.
constexpr bool kGroupSize(int c) {
  return c == 4 || c == 8 || c == 12 || c == 16 || c == 32;
}

template <class Load, int C>
struct RowLoops {
  static constexpr bool kValid = Load::kRows != DType::Q8_0 || C % 4 == 0;
  static constexpr auto scores() { return scores_c<Load, C>; }
  static constexpr auto accumulate() { return accumulate_row<Load, C>; }
  static constexpr auto scores_group() requires(kGroupSize(C)) { return scores_group_c<Load, C>; }
  static constexpr auto accumulate_group() requires(kGroupSize(C)) {
    return accumulate_group_c<Load, C>;
  }
};
template <class Load>
constexpr x86::RowLoopTable<RowLoops, Load, kMaxChunks> kChunkTable{};

template <class Load>
void scores_typed(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                  float scale, float* s) {
  const auto* kb = static_cast<const uint8_t*>(k);
  if (const auto loop = kChunkTable<Load>.scores_for(hd, 8))
    return loop(q, kb, k_stride, nk, scale, s);
  const Load load;
  for (int64_t j = 0; j < nk; ++j) {  // larger heads: the generic loop
    __m256 a = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; i += 8)
      a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load(kb + j * k_stride, i), a);
    s[j] = hsum(a) * scale;
  }
}

template <class Load>
void accumulate_typed(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                      int64_t nk, int64_t hd) {
  const auto* vb = static_cast<const uint8_t*>(v);
  if (const auto loop = kChunkTable<Load>.accumulate_for(hd, 8))
    return loop(acc, c, p, vb, v_stride, nk);
  const Load load;
  for (int64_t i = 0; i < hd; i += 8) {  // larger heads: the generic loop
    __m256 a = _mm256_mul_ps(_mm256_set1_ps(c), _mm256_loadu_ps(acc + i));
    for (int64_t j = 0; j < nk; ++j)
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load(vb + j * v_stride, i), a);
    _mm256_storeu_ps(acc + i, a);
  }
}

// The per-head entries: head sizes in whole groups of 8, the others the portable loops.
template <class Load>
constexpr KvRowOps kPerHead =
    KvRowsOrPortable<Load, scores_typed<Load>, accumulate_typed<Load>, 8>::ops;

// The group entries: the group loops where the table has them, else the per-head entries.
template <class Load>
void scores_group_typed(const float* q, int64_t g, const void* k, int64_t k_stride, int64_t nk,
                        int64_t hd, float scale, float* s, int64_t s_stride) {
  if (const auto loop = kChunkTable<Load>.scores_group_for(hd, 8))
    return loop(q, g, static_cast<const uint8_t*>(k), k_stride, nk, scale, s, s_stride);
  for (int64_t h = 0; h < g; ++h)
    kPerHead<Load>.scores(q + h * hd, k, k_stride, nk, hd, scale, s + h * s_stride);
}

template <class Load>
void accumulate_group_typed(float* acc, const float* c, const float* p, int64_t p_stride, int64_t g,
                            const void* v, int64_t v_stride, int64_t nk, int64_t hd) {
  if (const auto loop = kChunkTable<Load>.accumulate_group_for(hd, 8))
    return loop(acc, c, p, p_stride, g, static_cast<const uint8_t*>(v), v_stride, nk);
  for (int64_t h = 0; h < g; ++h)
    kPerHead<Load>.accumulate(acc + h * hd, c[h], p + h * p_stride, v, v_stride, nk, hd);
}

template <class Load>
constexpr KvRowOps kRowOps{kPerHead<Load>.scores, kPerHead<Load>.accumulate, nullptr,
                           scores_group_typed<Load>, accumulate_group_typed<Load>};

// f32 -> f16 rows by F16C, rounding to nearest even like ref::quantize_f16; a group of 8 with a
// NaN (whose payload the instruction keeps) and the tail take the reference.
void store_f16(const float* x, void* row, int64_t n) {
  auto* y = static_cast<uint16_t*>(row);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      ref::quantize_f16(x + i, y + i, 8);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (i < n) ref::quantize_f16(x + i, y + i, n - i);
}

constexpr KvRowOps with_store(KvRowOps ops, void (*store)(const float*, void*, int64_t)) {
  ops.store = store;
  return ops;
}

}  // namespace

// constinit: built by the compiler, so no code compiled with this file's flags runs at startup
// (where the CPU may lack them).
constinit const SmallOps small_ops = [] {
  SmallOps ops = portable_with_rows("avx2", with_store(kRowOps<LoadF16>, store_f16),
                                    kRowOps<LoadBF16>, kRowOps<LoadQ8_0>);
  ops.exp_sum = exp_sum;
  ops.swiglu = swiglu;
  return ops;
}();

}  // namespace hearth::kernels::avx2
