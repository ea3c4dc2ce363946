// The inner loops of the CPU's small ops (attention, SwiGLU, RMSNorm, adds) as one table of
// function pointers per ISA, plus pooled entry points. Extending: a new ISA fills SmallOps in
// its own per-ISA file (cpu/arch/<arch>/) and small_ops() picks it next to the kernel table.
#pragma once

#include <cstdint>

#include "base/thread-pool.h"
#include "kernels/ops.h"

namespace hearth::kernels {

// The two loop shapes over typed cache rows (the function types, then their pointers).
using KvRowLoop = void(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                       float scale, float* s);
using KvAccLoop = void(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                       int64_t nk, int64_t hd);
using KvRowFn = KvRowLoop*;
using KvAccFn = KvAccLoop*;

// Attention's two inner loops over typed KV cache rows (F16, BF16, Q8_0), read in place; row
// strides in bytes. Q8_0 rows start on a block and hd % 32 == 0.
struct KvRowOps {
  // s[j] = scale * dot(q[0..hd), row j of k) for j < nk.
  KvRowFn scores;
  // acc[0..hd) = acc * c + sum_j p[j] * (row j of v) for j < nk.
  KvAccFn accumulate;
  // row = x [n] in the row type, bit for bit what ref::quantize_* writes (store_kv_rows); nullptr:
  // the reference itself. Every token's K and V pass through it: the scalar f16 rounding took
  // 7% of an 8-client CPU server's time (kjv-13m).
  void (*store)(const float* x, void* row, int64_t n) = nullptr;
  // The two loops for the g query heads of one kv head (grouped-query attention), each row
  // read and widened once for all of them: query h is q + h * hd, its scores go to
  // s + h * s_stride; accumulate_group updates acc + h * hd with c[h] and p + h * p_stride.
  // Each head's result is what scores / accumulate give it within rounding. nullptr: the
  // per-head loops (attention.cpp falls back to them).
  void (*scores_group)(const float* q, int64_t g, const void* k, int64_t k_stride, int64_t nk,
                       int64_t hd, float scale, float* s, int64_t s_stride) = nullptr;
  void (*accumulate_group)(float* acc, const float* c, const float* p, int64_t p_stride, int64_t g,
                           const void* v, int64_t v_stride, int64_t nk, int64_t hd) = nullptr;
};

// All pointers are plain f32 arrays; no alignment is assumed; n may be any length (tails).
struct SmallOps {
  const char* name;
  // s[j] = scale * dot(q[0..hd), k[j * k_stride ..]) for j < nk.
  void (*scores)(const float* q, const float* k, int64_t k_stride, int64_t nk, int64_t hd,
                 float scale, float* s);
  // s[j] = exp(s[j] - m) for j < n; returns the sum of the new s.
  float (*exp_sum)(float* s, int64_t n, float m);
  // acc[0..hd) = acc * c + sum_j p[j] * v[j * v_stride ..] for j < nk.
  void (*accumulate)(float* acc, float c, const float* p, const float* v, int64_t v_stride,
                     int64_t nk, int64_t hd);
  // out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
  // Sum of x[i]^2 accumulated in double (RMSNorm: golden logits stay order-independent).
  double (*sum_squares)(const float* x, int64_t n);
  // y[i] = x[i] * s * w[i]
  void (*scale_mul)(const float* x, float s, const float* w, float* y, int64_t n);
  // y[i] += x[i]
  void (*add)(float* y, const float* x, int64_t n);
  // scores / accumulate over the typed cache rows.
  KvRowOps f16, bf16, q8_0;
};

// The portable loops (any architecture; the compiler vectorises what it can at baseline).
const SmallOps& portable_small_ops();
// The table for the active kernel table's ISA (HEARTH_ISA caps both the same way).
const SmallOps& small_ops();
// Every table this machine can run, best first (tests compare each with the reference).
const SmallOps* const* supported_small_ops(int* count);

// Attention over an explicit table (ops.h's attention uses small_ops()).
void attention_with(const SmallOps& ops, const float* q, const float* k_cache, const float* v_cache,
                    float* out, int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                    int64_t head_dim, float scale, const AttentionMask& mask, ThreadPool& pool);
void attention_with(const SmallOps& ops, const float* q, const KvRows& k_cache,
                    const KvRows& v_cache, float* out, int64_t n_tokens, int64_t pos0,
                    int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                    const AttentionMask& mask, ThreadPool& pool, const KvRowsAhead& ahead = {});
void attention_segments_with(const SmallOps& ops, const float* q,
                             std::span<const AttentionSegment> segs, float* out, int64_t n_heads,
                             int64_t n_kv_heads, int64_t head_dim, float scale,
                             const AttentionMask& mask, ThreadPool& pool);

// Pooled versions of ops.h's element-wise ops: same results, split across the pool when the
// work is large enough to pay a hand-off (prefill); small calls (decode) stay on the caller.
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps,
             ThreadPool& pool);
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style, ThreadPool& pool);
void rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                  const int32_t* pos, const float* inv_freq, RopeStyle style, float mscale,
                  ThreadPool& pool);
void swiglu(const float* gate, const float* up, float* out, int64_t n, ThreadPool& pool);
void gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n, ThreadPool& pool);
void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha,
                    float limit, ThreadPool& pool);
void add_inplace(float* y, const float* x, int64_t n, ThreadPool& pool);

}  // namespace hearth::kernels

// The portable typed-row loops (cpu/kv-rows.cpp): the scalar truth of KvRowOps.
namespace hearth::kernels::portable {
void scores_f16(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                float scale, float* s);
void scores_bf16(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                 float scale, float* s);
void scores_q8_0(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                 float scale, float* s);
void accumulate_f16(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                    int64_t nk, int64_t hd);
void accumulate_bf16(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                     int64_t nk, int64_t hd);
void accumulate_q8_0(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                     int64_t nk, int64_t hd);
}  // namespace hearth::kernels::portable

// The portable f32 loops (cpu/small-ops.cpp), the fallback on every architecture.
namespace hearth::kernels::portable {
void scores(const float* q, const float* k, int64_t k_stride, int64_t nk, int64_t hd, float scale,
            float* s);
float exp_sum(float* s, int64_t n, float m);
void accumulate(float* acc, float c, const float* p, const float* v, int64_t v_stride, int64_t nk,
                int64_t hd);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
double sum_squares(const float* x, int64_t n);
void scale_mul(const float* x, float s, const float* w, float* y, int64_t n);
void add(float* y, const float* x, int64_t n);
}  // namespace hearth::kernels::portable

namespace hearth::kernels {

// The portable table (constexpr here so the ISA tables built from it are constant-initialised,
// never read half-built during another file's static initialisation).
inline constexpr SmallOps kPortableSmallOps{"portable",
                                            portable::scores,
                                            portable::exp_sum,
                                            portable::accumulate,
                                            portable::swiglu,
                                            portable::sum_squares,
                                            portable::scale_mul,
                                            portable::add,
                                            {portable::scores_f16, portable::accumulate_f16},
                                            {portable::scores_bf16, portable::accumulate_bf16},
                                            {portable::scores_q8_0, portable::accumulate_q8_0}};

// The portable f32 loops with an ISA's own loops over the typed cache rows (the avx2 and neon
// tables: their compilers' baseline vectorisation of the f32 loops is as good as hand-written).
constexpr SmallOps portable_with_rows(const char* name, KvRowOps f16, KvRowOps bf16,
                                      KvRowOps q8_0) {
  SmallOps ops = kPortableSmallOps;
  ops.name = name;
  ops.f16 = f16;
  ops.bf16 = bf16;
  ops.q8_0 = q8_0;
  return ops;
}

// An ISA's typed-row loops over rows read by Load as a table entry: kScores and kAccumulate take
// the head sizes that are whole multiples of kWidth; the others go to the portable loops of the
// same row type (Load::kRows).
template <class Load, KvRowFn kScores, KvAccFn kAccumulate, int kWidth>
struct KvRowsOrPortable {
  static constexpr KvRowOps kPortable = Load::kRows == DType::F16    ? kPortableSmallOps.f16
                                        : Load::kRows == DType::BF16 ? kPortableSmallOps.bf16
                                                                     : kPortableSmallOps.q8_0;
  static void scores(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                     float scale, float* s) {
    if (hd % kWidth != 0) return kPortable.scores(q, k, k_stride, nk, hd, scale, s);
    kScores(q, k, k_stride, nk, hd, scale, s);
  }
  static void accumulate(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                         int64_t nk, int64_t hd) {
    if (hd % kWidth != 0) return kPortable.accumulate(acc, c, p, v, v_stride, nk, hd);
    kAccumulate(acc, c, p, v, v_stride, nk, hd);
  }
  static constexpr KvRowOps ops{scores, accumulate};
};

}  // namespace hearth::kernels

// Per-ISA tables, each defined in its own file: cpu/arch/x86/avx512-ops.cpp,
// cpu/arch/x86/avx2-ops.cpp, cpu/arch/arm/neon-kv-rows.cpp.
namespace hearth::kernels::avx512 {
extern const SmallOps small_ops;
}
namespace hearth::kernels::avx2 {
extern const SmallOps small_ops;
}
namespace hearth::kernels::neon {
extern const SmallOps small_ops;
}
