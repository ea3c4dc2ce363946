// The portable SmallOps loops and the pick of the table for this CPU. The portable loops are
// the fallback on every architecture (and the truth the per-ISA loops are tested against).
// Adding an ISA: its table in cpu/arch/<arch>/, one line in the candidates below.
#include "kernels/cpu/small-ops.h"

#include <cmath>
#include <string_view>

#include "kernels/cpu/kernel-table.h"

namespace hearth::kernels {

namespace portable {

void scores(const float* q, const float* k, int64_t k_stride, int64_t nk, int64_t hd, float scale,
            float* s) {
  for (int64_t j = 0; j < nk; ++j) {
    const float* kj = k + j * k_stride;
    // Four partial sums: breaks the add chain and lets the compiler use vector lanes.
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= hd; i += 4) {
      a0 += q[i] * kj[i];
      a1 += q[i + 1] * kj[i + 1];
      a2 += q[i + 2] * kj[i + 2];
      a3 += q[i + 3] * kj[i + 3];
    }
    for (; i < hd; ++i) a0 += q[i] * kj[i];
    s[j] = ((a0 + a1) + (a2 + a3)) * scale;
  }
}

float exp_sum(float* s, int64_t n, float m) {
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m);
    sum += s[j];
  }
  return sum;
}

void accumulate(float* acc, float c, const float* p, const float* v, int64_t v_stride, int64_t nk,
                int64_t hd) {
  if (c != 1.0f)
    for (int64_t i = 0; i < hd; ++i) acc[i] *= c;
  for (int64_t j = 0; j < nk; ++j) {
    const float pj = p[j];
    const float* vj = v + j * v_stride;
    for (int64_t i = 0; i < hd; ++i) acc[i] += pj * vj[i];
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

double sum_squares(const float* x, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  return ss;
}

void scale_mul(const float* x, float s, const float* w, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * w[i];
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace portable

namespace {

struct Candidates {
  const SmallOps* list[4];
  int count = 0;
};

Candidates candidates() {
  Candidates c;
#if defined(__x86_64__)
  // The AVX-512 loops need only F/DQ/BW/VL, a subset of what the avx512 kernel table needs.
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl) c.list[c.count++] = &avx512::small_ops;
  // AVX2 + FMA + F16C: the portable f32 loops with vector loops over the typed cache rows.
  if (f.avx2 && f.fma && f.f16c) c.list[c.count++] = &avx2::small_ops;
#endif
#if defined(__aarch64__)
  if (cpu_features().neon) c.list[c.count++] = &neon::small_ops;
#endif
  c.list[c.count++] = &kPortableSmallOps;
  return c;
}

}  // namespace

const SmallOps& portable_small_ops() {
  return kPortableSmallOps;
}

const SmallOps* const* supported_small_ops(int* count) {
  static const Candidates c = candidates();
  *count = c.count;
  return c.list;
}

const SmallOps& small_ops() {
  // Follows the matmul table so HEARTH_ISA=ref|avx2 A/B runs drop these loops to portable too.
  static const SmallOps& ops = [&]() -> const SmallOps& {
    int n = 0;
    const SmallOps* const* list = supported_small_ops(&n);
    const Isa isa = active_kernel_table().isa;
    for (int i = 0; i < n; ++i) {
      const std::string_view name = list[i]->name;
      if ((isa == Isa::kAvx512 && name == "avx512") || (isa == Isa::kAvx2 && name == "avx2") ||
          (isa == Isa::kNeon && name == "neon"))
        return *list[i];
    }
    return kPortableSmallOps;
  }();
  return ops;
}

}  // namespace hearth::kernels
