// The sampler's O(V) passes (logit-loops.h), each built three times on x86-64: for AVX-512, AVX2
// and the baseline (SSE2), the dynamic loader picking the widest the CPU has (GCC's
// target_clones). The bodies work on 16-lane vectors (F16 below): one zmm register, two ymm or
// four xmm. Built with -ffp-contract=off (CMakeLists.txt): no clone contracts a multiply-add the
// baseline rounds twice, so every CPU computes the same weights and a seed draws the same tokens
// everywhere. One draw over kjv-13m's 32,000 logits (temperature 0.8, top-p 0.95, min-p 0.05)
// went from 81 to 13-16 us on AMD Zen 5 (docs/performance.md, "Sampled decode").
//
// GCC 12 scalarises a compare whose mask is combined with another mask (|, &) inside a
// target_clones function, even in the AVX-512 clone: every test below is one compare feeding a
// select, or an arithmetic sign test.
#include "sampling/logit-loops.h"

#include "base/simd-clones.h"

namespace hearth::sampling {
namespace {

// Every helper below is inlined into each clone, so it is compiled for that clone's ISA (a call
// would run the baseline's form, with 16-lane vectors passed through memory).
#define HEARTH_LANES [[gnu::always_inline]] inline

using F16 = float __attribute__((vector_size(64)));
using I16 = int32_t __attribute__((vector_size(64)));
using D8 = double __attribute__((vector_size(64)));
static_assert(sizeof(F16) == kBlock * sizeof(float));

HEARTH_LANES F16 load(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
HEARTH_LANES void store(float* p, F16 v) {
  std::memcpy(p, &v, sizeof v);
}
HEARTH_LANES F16 splat(float x) {
  return F16{} + x;
}
// Lanes of a where mask (all ones / all zeros per lane) is set, else b's.
HEARTH_LANES F16 select(I16 mask, F16 a, F16 b) {
  return F16((I16(a) & mask) | (I16(b) & ~mask));
}
// Whether any lane of a compare's mask is set.
HEARTH_LANES bool any(I16 mask) {
  int32_t r = 0;
  for (int j = 0; j < kBlock; ++j) r |= mask[j];
  return r != 0;
}

// exp_nonpositive (logit-loops.h) on 16 lanes: the same operations in the same order.
HEARTH_LANES F16 exp_nonpositive16(F16 x) {
  const I16 in_range = x >= -87.0f;
  const F16 xc = select(in_range, x, splat(-87.0f));
  const F16 nf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  F16 r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  F16 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I16 bits = (__builtin_convertvector(nf, I16) + 127) << 23;
  return select(in_range, p * F16(bits), splat(0.0f));
}

// The 16 double accumulators of exp_weights (acc[j] += w[i + j]) as two 8-lane halves.
struct Acc16 {
  D8 lo{}, hi{};
  HEARTH_LANES void add(F16 w) {
    using F8 = float __attribute__((vector_size(32)));
    const F8 a = __builtin_shufflevector(w, w, 0, 1, 2, 3, 4, 5, 6, 7);
    const F8 b = __builtin_shufflevector(w, w, 8, 9, 10, 11, 12, 13, 14, 15);
    lo += __builtin_convertvector(a, D8);
    hi += __builtin_convertvector(b, D8);
  }
  HEARTH_LANES double sum() const {  // lanes 0..15 in order, as the scalar form added them
    double s = 0;
    for (int j = 0; j < 8; ++j) s += lo[j];
    for (int j = 0; j < 8; ++j) s += hi[j];
    return s;
  }
};

// The exp pass of exp_weights / exp_sum. At t == 1 (top-p's weights) x / t is x, so the
// division is left out: the same bits, a third less arithmetic a lane.
template <bool kWrite, bool kUnitT>
HEARTH_LANES double exp_pass(const float* x, int64_t n, float m, float t, float* w) {
  const float ms = m / t;
  Acc16 acc;
  int64_t i = 0;
  constexpr int64_t kGroup = 8 * kBlock;
  for (; i + kGroup <= n; i += kGroup) {
    F16 g{};
    for (int64_t b = 0; b < kGroup; b += kBlock) {
      const F16 v = load(x + i + b);
      const F16 e = exp_nonpositive16((kUnitT ? v : v / t) - ms);
      if constexpr (kWrite) store(w + i + b, e);
      g += e;
    }
    acc.add(g);
  }
  for (; i + kBlock <= n; i += kBlock) {
    const F16 v = load(x + i);
    const F16 e = exp_nonpositive16((kUnitT ? v : v / t) - ms);
    if constexpr (kWrite) store(w + i, e);
    acc.add(e);
  }
  double sum = acc.sum();
  for (; i < n; ++i) {
    const float e = exp_nonpositive(x[i] / t - ms);
    if constexpr (kWrite) w[i] = e;
    sum += double(e);
  }
  return sum;
}

template <bool kWrite>
HEARTH_LANES double exp_pass(const float* x, int64_t n, float m, float t, float* w) {
  return t == 1.0f ? exp_pass<kWrite, true>(x, n, m, t, w) : exp_pass<kWrite, false>(x, n, m, t, w);
}

}  // namespace

HEARTH_SIMD_CLONES float copy_clean_max(const float* __restrict in, float* __restrict out,
                                        int64_t n) {
  const F16 neg_inf = splat(kNegInf);
  F16 acc = neg_inf;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const F16 v = load(in + i);
    const F16 c = select(v == v, v, neg_inf);
    store(out + i, c);
    acc = select(c > acc, c, acc);
  }
  float m = kNegInf;
  for (int j = 0; j < kBlock; ++j) m = acc[j] > m ? acc[j] : m;
  for (; i < n; ++i) {
    out[i] = in[i] == in[i] ? in[i] : kNegInf;
    m = out[i] > m ? out[i] : m;
  }
  return m;
}

HEARTH_SIMD_CLONES float max_value(const float* x, int64_t n, bool* has_nan) {
  // Four accumulators: one would chain every block's compare and select.
  F16 acc[4] = {splat(kNegInf), splat(kNegInf), splat(kNegInf), splat(kNegInf)};
  // A lane turns NaN once it has seen one (one compare a select: masks OR-ed together were
  // scalarised by GCC 12 in target_clones functions).
  F16 nan{};
  int64_t i = 0;
  for (; i + 4 * kBlock <= n; i += 4 * kBlock) {
    for (int a = 0; a < 4; ++a) {
      const F16 v = load(x + i + a * kBlock);
      acc[a] = select(v > acc[a], v, acc[a]);  // a NaN compares false
      nan = select(v == v, nan, v);
    }
  }
  for (; i + kBlock <= n; i += kBlock) {
    const F16 v = load(x + i);
    acc[0] = select(v > acc[0], v, acc[0]);
    nan = select(v == v, nan, v);
  }
  float m = kNegInf;
  for (const F16& a : acc)
    for (int j = 0; j < kBlock; ++j) m = a[j] > m ? a[j] : m;
  bool any_nan = false;
  for (int j = 0; j < kBlock; ++j) any_nan = any_nan || nan[j] != nan[j];
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    any_nan = any_nan || x[i] != x[i];
  }
  if (has_nan) *has_nan = any_nan;
  return m;
}

HEARTH_SIMD_CLONES float min_finite_value(const float* x, int64_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  F16 acc = splat(kInf);
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    // -inf taken as +inf first: one compare a select (two compares' masks combined were
    // scalarised by GCC 12 in target_clones functions).
    F16 v = load(x + i);
    v = select(v == kNegInf, splat(kInf), v);
    acc = select(v < acc, v, acc);
  }
  float m = kInf;
  for (int j = 0; j < kBlock; ++j) m = acc[j] < m ? acc[j] : m;
  for (; i < n; ++i) m = x[i] < m && x[i] != kNegInf ? x[i] : m;
  return m;
}

HEARTH_SIMD_CLONES double exp_weights(const float* __restrict x, int64_t n, float m, float t,
                                      float* __restrict w) {
  return exp_pass<true>(x, n, m, t, w);
}

HEARTH_SIMD_CLONES double exp_sum(const float* x, int64_t n, float m, float t) {
  return exp_pass<false>(x, n, m, t, nullptr);
}

HEARTH_SIMD_CLONES int64_t collect_band(const float* x, const int32_t* id, int64_t n, float floor,
                                        float m, float t, const BandOut& out, double* mass) {
  const float ms = m / t;
  int64_t kept = 0;
  double sum = 0;
  auto take = [&](int64_t i, float e) {
    out.logit[kept] = x[i];
    out.id[kept] = id ? id[i] : int32_t(i);
    if (out.weight) {
      out.weight[kept] = e;
      sum += double(e);
    }
    ++kept;
  };
  const F16 fl = splat(floor);
  // A block in the band: its weights as one vector (the scalar form's bits), then the lanes.
  // (The lanes are tested again from x: reading a compare's lanes one by one made GCC scalarise
  // the compare itself.)
  auto block = [&](int64_t i) {
    const F16 v = load(x + i);
    if (!any(v >= fl)) return;
    const F16 e = out.weight ? exp_nonpositive16(v / t - ms) : F16{};
    for (int j = 0; j < kBlock; ++j)
      if (x[i + j] >= floor) take(i + j, e[j]);
  };
  // One test a 64-element group (any() is a horizontal reduction), then one a block of a hit.
  // The group's test is on sign bits: x - floor is negative exactly when x < floor (x != floor
  // never subtracts to zero), and -inf stays negative. (An OR of four compares' masks was
  // scalarised by GCC 12 in target_clones functions: 64 scalar compares a group.)
  constexpr int64_t kGroup = 4 * kBlock;
  constexpr int32_t kSign = int32_t(0x80000000u);
  int64_t i = 0;
  for (; i + kGroup <= n; i += kGroup) {
    const I16 below = I16(load(x + i) - fl) & I16(load(x + i + kBlock) - fl) &
                      I16(load(x + i + 2 * kBlock) - fl) & I16(load(x + i + 3 * kBlock) - fl);
    if (!any(~below & kSign)) continue;
    for (int64_t b = 0; b < kGroup; b += kBlock) block(i + b);
  }
  for (; i + kBlock <= n; i += kBlock) block(i);
  for (; i < n; ++i)
    if (x[i] >= floor) take(i, out.weight ? exp_nonpositive(x[i] / t - ms) : 0.0f);
  if (mass) *mass = sum;
  return kept;
}

}  // namespace hearth::sampling
