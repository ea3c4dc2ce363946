// Typed KV cache rows (ops.h KvRows): row sizes, the f32 -> type store, and the portable
// attention loops over F16, BF16 and Q8_0 rows, which are the scalar truth the per-ISA loops
// (cpu/arch/*/…-kv-rows.cpp) are tested against. Adding a cache type: a case in each switch
// here, its two loops in every table, and a row in tests/ops/kv-rows-test.cpp.
#include <cassert>
#include <cstring>

#include "base/half.h"
#include "kernels/cpu/small-ops.h"
#include "kernels/quant-blocks.h"
#include "kernels/ref/quant-ref.h"

namespace hearth::kernels {

bool is_kv_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0;
}

int64_t kv_row_bytes(DType t, int64_t n) {
  switch (t) {
    case DType::F32:
      return n * 4;
    case DType::F16:
    case DType::BF16:
      return n * 2;
    case DType::Q8_0:
      assert(n % kQK32 == 0);
      return n / kQK32 * int64_t(sizeof(BlockQ8_0));
    default:
      assert(false && "not a KV cache type");
      return 0;
  }
}

void store_kv_rows(DType t, const float* src, void* dst, int64_t n_tokens, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t bytes = kv_row_bytes(t, n);
  const auto store_f16 = small_ops().f16.store;
  for (int64_t r = 0; r < n_tokens; ++r) {
    const float* x = src + r * n;
    uint8_t* y = out + r * bytes;
    switch (t) {
      case DType::F32:
        std::memcpy(y, x, size_t(bytes));
        break;
      case DType::F16:
        if (store_f16)
          store_f16(x, y, n);
        else
          ref::quantize_f16(x, y, n);
        break;
      case DType::BF16:
        ref::quantize_bf16(x, y, n);
        break;
      case DType::Q8_0:
        ref::quantize_q8_0(x, y, n);
        break;
      default:
        assert(false && "not a KV cache type");
    }
  }
}

void load_kv_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      break;
    case DType::F16:
      ref::dequantize_f16(src, dst, n);
      break;
    case DType::BF16:
      ref::dequantize_bf16(src, dst, n);
      break;
    case DType::Q8_0:
      ref::dequantize_q8_0(src, dst, n);
      break;
    default:
      assert(false && "not a KV cache type");
  }
}

namespace portable {

namespace {

const uint8_t* row_at(const void* base, int64_t stride, int64_t j) {
  return static_cast<const uint8_t*>(base) + j * stride;
}

// Element i of a row as f32, for the plain 16-bit types.
template <float (*Widen)(uint16_t)>
float dot_16bit(const float* q, const uint8_t* row, int64_t hd) {
  const auto* k = reinterpret_cast<const uint16_t*>(row);
  float a0 = 0, a1 = 0;
  int64_t i = 0;
  for (; i + 2 <= hd; i += 2) {
    a0 += q[i] * Widen(k[i]);
    a1 += q[i + 1] * Widen(k[i + 1]);
  }
  for (; i < hd; ++i) a0 += q[i] * Widen(k[i]);
  return a0 + a1;
}

template <float (*Widen)(uint16_t)>
void accumulate_16bit(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                      int64_t nk, int64_t hd) {
  if (c != 1.0f)
    for (int64_t i = 0; i < hd; ++i) acc[i] *= c;
  for (int64_t j = 0; j < nk; ++j) {
    const auto* vj = reinterpret_cast<const uint16_t*>(row_at(v, v_stride, j));
    for (int64_t i = 0; i < hd; ++i) acc[i] += p[j] * Widen(vj[i]);
  }
}

}  // namespace

void scores_f16(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                float scale, float* s) {
  for (int64_t j = 0; j < nk; ++j)
    s[j] = dot_16bit<fp16_to_f32>(q, row_at(k, k_stride, j), hd) * scale;
}

void scores_bf16(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                 float scale, float* s) {
  for (int64_t j = 0; j < nk; ++j)
    s[j] = dot_16bit<bf16_to_f32>(q, row_at(k, k_stride, j), hd) * scale;
}

// Per block: the int8 dot in f32 (exact up to 2^24 per partial), times the block's scale.
void scores_q8_0(const float* q, const void* k, int64_t k_stride, int64_t nk, int64_t hd,
                 float scale, float* s) {
  assert(hd % kQK32 == 0);
  for (int64_t j = 0; j < nk; ++j) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(row_at(k, k_stride, j));
    float sum = 0;
    for (int64_t b = 0; b < hd / kQK32; ++b) {
      const float* qb = q + b * kQK32;
      float part = 0;
      for (int i = 0; i < kQK32; ++i) part += qb[i] * float(blocks[b].qs[i]);
      sum += part * fp16_to_f32(blocks[b].d);
    }
    s[j] = sum * scale;
  }
}

void accumulate_f16(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                    int64_t nk, int64_t hd) {
  accumulate_16bit<fp16_to_f32>(acc, c, p, v, v_stride, nk, hd);
}

void accumulate_bf16(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                     int64_t nk, int64_t hd) {
  accumulate_16bit<bf16_to_f32>(acc, c, p, v, v_stride, nk, hd);
}

// acc += p[j] * d_b * q: the block scale folds into the weight, one multiply per block.
void accumulate_q8_0(float* acc, float c, const float* p, const void* v, int64_t v_stride,
                     int64_t nk, int64_t hd) {
  assert(hd % kQK32 == 0);
  if (c != 1.0f)
    for (int64_t i = 0; i < hd; ++i) acc[i] *= c;
  for (int64_t j = 0; j < nk; ++j) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(row_at(v, v_stride, j));
    for (int64_t b = 0; b < hd / kQK32; ++b) {
      const float w = p[j] * fp16_to_f32(blocks[b].d);
      float* a = acc + b * kQK32;
      for (int i = 0; i < kQK32; ++i) a[i] += w * float(blocks[b].qs[i]);
    }
  }
}

}  // namespace portable

}  // namespace hearth::kernels
