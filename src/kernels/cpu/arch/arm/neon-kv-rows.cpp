// NEON attention loops over typed KV cache rows (KvRowOps, cpu/small-ops.h) for baseline
// ARMv8-A: f16 through the FCVTL conversion, bf16 by a shift, q8_0 as d * q of each block, with
// group loops for grouped-query attention; and the softmax exponentials and SwiGLU on a vector
// exp. The neon SmallOps table at the end pairs
// them with the portable f32 loops. Head sizes that are not whole groups of 8 go to the
// portable loops.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/small-ops.h"
#include "kernels/quant-blocks.h"

namespace hearth::kernels::neon {

namespace {

// Elements [i, i + 8) of a row as f32 (i % 8 == 0), in two registers.
struct LoadF16 {
  static constexpr DType kRows = DType::F16;
  float32x4x2_t operator()(const uint8_t* row, int64_t i) const {
    const float16x8_t h =
        vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(row) + i));
    return {vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
  }
};
struct LoadBF16 {
  static constexpr DType kRows = DType::BF16;
  float32x4x2_t operator()(const uint8_t* row, int64_t i) const {
    const uint16x8_t h = vld1q_u16(reinterpret_cast<const uint16_t*>(row) + i);
    return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)),
            vreinterpretq_f32_u32(vshll_high_n_u16(h, 16))};
  }
};
struct LoadQ8_0 {
  static constexpr DType kRows = DType::Q8_0;
  float32x4x2_t operator()(const uint8_t* row, int64_t i) const {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + i / kQK32;
    const float d = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(b->d))), 0);
    const int16x8_t q = vmovl_s8(vld1_s8(b->qs + i % kQK32));
    return {vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), d),
            vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(q)), d)};
  }
};

// The scores of G query heads of one kv head over the same rows (G > 1: grouped-query
// attention, G <= kGroupHeads), each 8-element piece of a row loaded and widened once for all of
// them; per head the products and sums run in the same order whatever G is, so a group gives
// each head its one-head bits.
constexpr int64_t kGroupHeads = 4;

template <class Load, int G>
void scores_heads(const float* q, int64_t hd, const uint8_t* kb, int64_t k_stride, int64_t nk,
                  float scale, float* s, int64_t s_stride) {
  const Load load;
  for (int64_t j = 0; j < nk; ++j) {
    const uint8_t* row = kb + j * k_stride;
    float32x4_t a[G], b[G];
    for (int h = 0; h < G; ++h) a[h] = b[h] = vdupq_n_f32(0);
    for (int64_t i = 0; i < hd; i += 8) {
      const float32x4x2_t x = load(row, i);
      for (int h = 0; h < G; ++h) {
        a[h] = vfmaq_f32(a[h], vld1q_f32(q + h * hd + i), x.val[0]);
        b[h] = vfmaq_f32(b[h], vld1q_f32(q + h * hd + i + 4), x.val[1]);
      }
    }
    for (int h = 0; h < G; ++h) s[h * s_stride + j] = vaddvq_f32(vaddq_f32(a[h], b[h])) * scale;
  }
}

template <class Load>
void scores_typed(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                  float scale, float* s) {
  scores_heads<Load, 1>(q, hd, static_cast<const uint8_t*>(k), k_stride, nk, scale, s, 0);
}

template <class Load>
void accumulate_typed(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                      int64_t nk, int64_t hd) {
  const auto* vb = static_cast<const uint8_t*>(v);
  const Load load;
  int64_t i = 0;
  for (; i + 32 <= hd; i += 32) {  // 32 columns in eight registers
    float32x4_t a[8];
    for (int r = 0; r < 8; ++r) a[r] = vmulq_n_f32(vld1q_f32(acc + i + 4 * r), c);
    for (int64_t j = 0; j < nk; ++j) {
      const uint8_t* row = vb + j * v_stride;
      for (int r = 0; r < 4; ++r) {
        const float32x4x2_t x = load(row, i + 8 * r);
        a[2 * r] = vfmaq_n_f32(a[2 * r], x.val[0], p[j]);
        a[2 * r + 1] = vfmaq_n_f32(a[2 * r + 1], x.val[1], p[j]);
      }
    }
    for (int r = 0; r < 8; ++r) vst1q_f32(acc + i + 4 * r, a[r]);
  }
  for (; i < hd; i += 8) {
    float32x4_t a0 = vmulq_n_f32(vld1q_f32(acc + i), c);
    float32x4_t a1 = vmulq_n_f32(vld1q_f32(acc + i + 4), c);
    for (int64_t j = 0; j < nk; ++j) {
      const float32x4x2_t x = load(vb + j * v_stride, i);
      a0 = vfmaq_n_f32(a0, x.val[0], p[j]);
      a1 = vfmaq_n_f32(a1, x.val[1], p[j]);
    }
    vst1q_f32(acc + i, a0);
    vst1q_f32(acc + i + 4, a1);
  }
}

// P.V for G heads in passes of kCols columns, the G heads' accumulators of a pass in registers.
template <class Load, int G, int kCols>
void accumulate_heads(float* acc, const float* c, const float* p, int64_t p_stride,
                      const uint8_t* vb, int64_t v_stride, int64_t nk, int64_t hd) {
  constexpr int R = kCols / 4;  // registers a head
  const Load load;
  for (int64_t i = 0; i < hd; i += kCols) {
    float32x4_t a[G][R];
    for (int h = 0; h < G; ++h)
      for (int r = 0; r < R; ++r) a[h][r] = vmulq_n_f32(vld1q_f32(acc + h * hd + i + 4 * r), c[h]);
    for (int64_t j = 0; j < nk; ++j) {
      const uint8_t* row = vb + j * v_stride;
      for (int r = 0; r < R; r += 2) {
        const float32x4x2_t x = load(row, i + 4 * r);
        for (int h = 0; h < G; ++h) {
          const float pj = p[h * p_stride + j];
          a[h][r] = vfmaq_n_f32(a[h][r], x.val[0], pj);
          a[h][r + 1] = vfmaq_n_f32(a[h][r + 1], x.val[1], pj);
        }
      }
    }
    for (int h = 0; h < G; ++h)
      for (int r = 0; r < R; ++r) vst1q_f32(acc + h * hd + i + 4 * r, a[h][r]);
  }
}

// A row type's table entry: head sizes in whole groups of 8, with group loops; the others go to
// the portable loops (per head).
template <class Load>
struct NeonRows {
  using Rows = KvRowsOrPortable<Load, scores_typed<Load>, accumulate_typed<Load>, 8>;

  // f(h, G) for the heads of a group in chunks of up to kGroupHeads; G = 1 (a last single head,
  // or a head size the loops lack) is the per-head entry's.
  template <class F>
  static void by_head_chunks(int64_t g, int64_t hd, F&& f) {
    for (int64_t h = 0; h < g;) {
      const int64_t n = hd % 8 != 0 ? 1 : std::min(kGroupHeads, g - h);
      switch (n) {
        case 4:
          f(h, std::integral_constant<int, 4>{});
          break;
        case 3:
          f(h, std::integral_constant<int, 3>{});
          break;
        case 2:
          f(h, std::integral_constant<int, 2>{});
          break;
        default:
          f(h, std::integral_constant<int, 1>{});
      }
      h += n;
    }
  }

  static void scores_group(const float* q, int64_t g, const void* k, int64_t k_stride, int64_t nk,
                           int64_t hd, float scale, float* s, int64_t s_stride) {
    by_head_chunks(g, hd, [&](int64_t h, auto heads) {
      constexpr int G = decltype(heads)::value;
      if constexpr (G == 1)
        Rows::scores(q + h * hd, k, k_stride, nk, hd, scale, s + h * s_stride);
      else
        scores_heads<Load, G>(q + h * hd, hd, static_cast<const uint8_t*>(k), k_stride, nk, scale,
                              s + h * s_stride, s_stride);
    });
  }

  static void accumulate_group(float* acc, const float* c, const float* p, int64_t p_stride,
                               int64_t g, const void* v, int64_t v_stride, int64_t nk, int64_t hd) {
    by_head_chunks(g, hd, [&](int64_t h, auto heads) {
      constexpr int G = decltype(heads)::value;
      float* ah = acc + h * hd;
      const float* ph = p + h * p_stride;
      const auto* vb = static_cast<const uint8_t*>(v);
      if constexpr (G == 1)
        Rows::accumulate(ah, c[h], ph, v, v_stride, nk, hd);
      else if (hd % 16 == 0)  // (16 columns a pass where they divide the head: fewer passes)
        accumulate_heads<Load, G, 16>(ah, c + h, ph, p_stride, vb, v_stride, nk, hd);
      else
        accumulate_heads<Load, G, 8>(ah, c + h, ph, p_stride, vb, v_stride, nk, hd);
    });
  }

  static constexpr KvRowOps ops = [] {
    KvRowOps o = Rows::ops;
    o.scores_group = scores_group;
    o.accumulate_group = accumulate_group;
    return o;
  }();
};

template <class Load>
constexpr KvRowOps kRowOps = NeonRows<Load>::ops;

// e^x for 4 lanes, the x86 files' algorithm (degree-6 polynomial after a two-part ln 2
// reduction, ~2 ulp; 0 below -87 so no result is denormal; x capped at 88.3 so 2^n stays a
// normal exponent). The portable loops' libm expf per element was a third of a decode step's
// attention on AVX2 (x86/avx2-ops.cpp); softmax and SwiGLU call it per element here too.
inline float32x4_t exp4(float32x4_t x) {
  const uint32x4_t normal = vcgeq_f32(x, vdupq_n_f32(-87.0f));
  x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.3f)), vdupq_n_f32(-87.0f));
  const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504f));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));  // x - n ln2, ln2 as hi + lo
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.0f / 720);
  for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = vfmaq_f32(vdupq_n_f32(c), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(y), normal));
}

float exp_sum(float* s, int64_t n, float m) {
  const float32x4_t mv = vdupq_n_f32(m);
  float32x4_t sum = vdupq_n_f32(0);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + j), mv));
    vst1q_f32(s + j, e);
    sum = vaddq_f32(sum, e);
  }
  if (j < n) {  // the tail through a padded vector (-inf lanes give 0)
    float t[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int64_t i = j; i < n; ++i) t[i - j] = s[i];
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(t), mv));
    vst1q_f32(t, e);
    for (int64_t i = j; i < n; ++i) s[i] = t[i - j];
    sum = vaddq_f32(sum, e);
  }
  return vaddvq_f32(sum);
}

// silu(g) * u = g / (1 + e^-g) * u.
inline float32x4_t swiglu4(float32x4_t g, float32x4_t u) {
  const float32x4_t e = exp4(vnegq_f32(g));
  return vmulq_f32(vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e)), u);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, swiglu4(vld1q_f32(gate + i), vld1q_f32(up + i)));
  if (i < n) {
    float g[4] = {}, u[4] = {}, o[4];
    for (int64_t k = i; k < n; ++k) g[k - i] = gate[k], u[k - i] = up[k];
    vst1q_f32(o, swiglu4(vld1q_f32(g), vld1q_f32(u)));
    for (int64_t k = i; k < n; ++k) out[k] = o[k - i];
  }
}

}  // namespace

// constinit: built by the compiler, so no code compiled with this file's flags runs at startup
// (where the CPU may lack them).
constinit const SmallOps small_ops = [] {
  SmallOps ops = portable_with_rows("neon", kRowOps<LoadF16>, kRowOps<LoadBF16>, kRowOps<LoadQ8_0>);
  ops.exp_sum = exp_sum;
  ops.swiglu = swiglu;
  return ops;
}();

}  // namespace hearth::kernels::neon
