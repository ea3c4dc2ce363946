// AVX2 + FMA + F16C attention loops over typed KV cache rows (KvRowOps, cpu/small-ops.h): f16
// through the F16C conversion, bf16 by a shift, q8_0 as d * q of each block. The avx2 SmallOps
// table at the end pairs them with the portable f32 loops. Compiled with AVX2 flags;
// reached only after cpuid says yes. Head sizes that are not whole vectors of 8 go to the
// portable loops.
#include <immintrin.h>

#include <type_traits>

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

template <class Load>
void scores_typed(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                  float scale, float* s) {
  const auto* kb = static_cast<const uint8_t*>(k);
  const Load load;
  for (int64_t j = 0; j < nk; ++j) {
    const uint8_t* row = kb + j * k_stride;
    if constexpr (std::is_same_v<Load, LoadQ8_0>) {  // a block's products summed, scaled once
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(row);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t i = 0; i < hd; i += kQK32, ++blk) {
        __m256 sum = _mm256_mul_ps(_mm256_loadu_ps(q + i), widen_q8(blk->qs));
        for (int c = 8; c < kQK32; c += 8)
          sum = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + c), widen_q8(blk->qs + c), sum);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(blk->d)), sum, acc);
      }
      s[j] = hsum(acc) * scale;
      continue;
    }
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= hd; i += 16) {
      a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load(row, i), a);
      b = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load(row, i + 8), b);
    }
    if (i < hd) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load(row, i), a);
    s[j] = hsum(_mm256_add_ps(a, b)) * scale;
  }
}

template <class Load>
void accumulate_typed(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                      int64_t nk, int64_t hd) {
  const auto* vb = static_cast<const uint8_t*>(v);
  const __m256 cv = _mm256_set1_ps(c);
  const Load load;
  int64_t i = 0;
  for (; i + 32 <= hd; i += 32) {  // 32 columns in four registers
    __m256 a[4];
    for (int r = 0; r < 4; ++r) a[r] = _mm256_mul_ps(cv, _mm256_loadu_ps(acc + i + 8 * r));
    for (int64_t j = 0; j < nk; ++j) {
      const uint8_t* row = vb + j * v_stride;
      if constexpr (std::is_same_v<Load, LoadQ8_0>) {  // 32 columns = one block: one scale
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + i / kQK32;
        const __m256 w = _mm256_set1_ps(p[j] * _cvtsh_ss(blk->d));
        for (int r = 0; r < 4; ++r) a[r] = _mm256_fmadd_ps(w, widen_q8(blk->qs + 8 * r), a[r]);
      } else {
        const __m256 pj = _mm256_set1_ps(p[j]);
        for (int r = 0; r < 4; ++r) a[r] = _mm256_fmadd_ps(pj, load(row, i + 8 * r), a[r]);
      }
    }
    for (int r = 0; r < 4; ++r) _mm256_storeu_ps(acc + i + 8 * r, a[r]);
  }
  for (; i < hd; i += 8) {
    __m256 a = _mm256_mul_ps(cv, _mm256_loadu_ps(acc + i));
    for (int64_t j = 0; j < nk; ++j)
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load(vb + j * v_stride, i), a);
    _mm256_storeu_ps(acc + i, a);
  }
}

// A row type's table entry (head sizes in whole groups of 8; the others: the portable loops).
template <class Load>
constexpr KvRowOps kRowOps =
    KvRowsOrPortable<Load, scores_typed<Load>, accumulate_typed<Load>, 8>::ops;

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
constinit const SmallOps small_ops = portable_with_rows(
    "avx2", with_store(kRowOps<LoadF16>, store_f16), kRowOps<LoadBF16>, kRowOps<LoadQ8_0>);

}  // namespace hearth::kernels::avx2
