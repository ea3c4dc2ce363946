// Typed KV cache rows on the device (kernels::KvRows' layout, byte for byte the CPU's, so saved
// and copied rows move between backends): elements read as f32 in place, no dequantized copy,
// and f32 stored in the rounding of the CPU's store_kv_rows. The attention kernels
// (attention.cu, attention-prefill.cu, attention-masked.cu) and the K/V append
// (kv-store.cu) take their element type as a KvForm template argument. A new cache type: a
// KvForm, its case in kv_form() and in each function here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/warp-reduce.cuh"
#include "tensor/dtype.h"

namespace hearth::cuda {

// The element types of a kernel's K and V rows: one form when both share a type (read without
// a branch), kMixed when they differ (each read switches on the runtime type, a warp-uniform
// branch: slower, and rare).
enum class KvForm { kF32, kF16, kBF16, kQ8_0, kMixed };

constexpr int kQ8Bytes = 34;  // block_q8_0: fp16 scale, then 32 int8

inline bool is_cuda_kv_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0;
}

// The element type of a single-type form (what kv_store_warp / kv_round_warp take), known at
// compile time so a kernel instance for one form keeps only that form's store code.
template <KvForm F>
__host__ __device__ constexpr DType kv_form_dtype() {
  static_assert(F != KvForm::kMixed, "one element type");
  return F == KvForm::kF16    ? DType::F16
         : F == KvForm::kBF16 ? DType::BF16
         : F == KvForm::kQ8_0 ? DType::Q8_0
                              : DType::F32;
}

inline KvForm kv_form(DType k, DType v) {
  if (k != v) return KvForm::kMixed;
  switch (k) {
    case DType::F16:
      return KvForm::kF16;
    case DType::BF16:
      return KvForm::kBF16;
    case DType::Q8_0:
      return KvForm::kQ8_0;
    default:
      return KvForm::kF32;
  }
}

// Calls fn(std::integral_constant<KvForm, F>{}) for the form of (k, v).
template <class Fn>
void dispatch_kv_form(DType k, DType v, Fn&& fn) {
  switch (kv_form(k, v)) {
    case KvForm::kF16:
      return fn(std::integral_constant<KvForm, KvForm::kF16>{});
    case KvForm::kBF16:
      return fn(std::integral_constant<KvForm, KvForm::kBF16>{});
    case KvForm::kQ8_0:
      return fn(std::integral_constant<KvForm, KvForm::kQ8_0>{});
    case KvForm::kMixed:
      return fn(std::integral_constant<KvForm, KvForm::kMixed>{});
    default:
      return fn(std::integral_constant<KvForm, KvForm::kF32>{});
  }
}

// Element e (row-major over the rows: row * row_elems + i) of rows at `base`, as f32. rt: the
// runtime type, read only by kMixed.
template <KvForm F>
__device__ __forceinline__ float kv_load(const uint8_t* base, int64_t e, DType rt = DType::F32) {
  if constexpr (F == KvForm::kF32) {
    return reinterpret_cast<const float*>(base)[e];
  } else if constexpr (F == KvForm::kF16) {
    return __half2float(reinterpret_cast<const __half*>(base)[e]);
  } else if constexpr (F == KvForm::kBF16) {
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(base)[e]);
  } else if constexpr (F == KvForm::kQ8_0) {
    const uint8_t* b = base + (e >> 5) * kQ8Bytes;
    return __half2float(*reinterpret_cast<const __half*>(b)) *
           float(reinterpret_cast<const int8_t*>(b)[2 + (e & 31)]);
  } else {
    switch (rt) {
      case DType::F16:
        return kv_load<KvForm::kF16>(base, e);
      case DType::BF16:
        return kv_load<KvForm::kBF16>(base, e);
      case DType::Q8_0:
        return kv_load<KvForm::kQ8_0>(base, e);
      default:
        return kv_load<KvForm::kF32>(base, e);
    }
  }
}

// Element e0 + 32 i + lane of a warp's row, e0 % 32 == 0 whenever q8_0 is involved (a head of
// whole blocks): q8_0 reads lane's quant of block e0 / 32 + i and the block's scale (one
// broadcast load), without dividing e.
template <KvForm F>
__device__ __forceinline__ float kv_load_lane(const uint8_t* base, int64_t e0, int i, int lane,
                                              DType rt = DType::F32) {
  if constexpr (F == KvForm::kQ8_0) {
    const uint8_t* b = base + ((e0 >> 5) + i) * kQ8Bytes;
    return __half2float(*reinterpret_cast<const __half*>(b)) *
           float(reinterpret_cast<const int8_t*>(b)[2 + lane]);
  } else if constexpr (F == KvForm::kMixed) {
    if (rt == DType::Q8_0) return kv_load_lane<KvForm::kQ8_0>(base, e0, i, lane);
    return kv_load<KvForm::kMixed>(base, e0 + 32 * i + lane, rt);
  } else {
    return kv_load<F>(base, e0 + 32 * i + lane);
  }
}

// A cache element as loaded, widened to f32 only when used (value()): a latency-bound loop
// issues a round of raw loads and converts after they land, where converting inside the round
// makes each conversion wait for its load before the next load issues (the split-K decode at
// depth ran at a quarter of the bandwidth that way). f32 and the mixed form load f32 directly.
template <KvForm F>
struct KvRaw {
  float v;
  __device__ __forceinline__ void load(const uint8_t* base, int64_t e0, int i, int lane, DType rt) {
    v = kv_load_lane<F>(base, e0, i, lane, rt);
  }
  __device__ __forceinline__ void zero() { v = 0.f; }
  __device__ __forceinline__ float value() const { return v; }
};
template <>
struct KvRaw<KvForm::kF16> {
  __half v;
  __device__ __forceinline__ void load(const uint8_t* base, int64_t e0, int i, int lane, DType) {
    v = reinterpret_cast<const __half*>(base)[e0 + 32 * i + lane];
  }
  __device__ __forceinline__ void zero() { v = __float2half(0.f); }
  __device__ __forceinline__ float value() const { return __half2float(v); }
};
template <>
struct KvRaw<KvForm::kBF16> {
  __nv_bfloat16 v;
  __device__ __forceinline__ void load(const uint8_t* base, int64_t e0, int i, int lane, DType) {
    v = reinterpret_cast<const __nv_bfloat16*>(base)[e0 + 32 * i + lane];
  }
  __device__ __forceinline__ void zero() { v = __float2bfloat16(0.f); }
  __device__ __forceinline__ float value() const { return __bfloat162float(v); }
};
template <>
struct KvRaw<KvForm::kQ8_0> {  // element e0 + 32 i + lane: lane's quant of a block and its scale
  __half d;
  int8_t q;
  __device__ __forceinline__ void load(const uint8_t* base, int64_t e0, int i, int lane, DType) {
    const uint8_t* b = base + ((e0 >> 5) + i) * kQ8Bytes;
    d = *reinterpret_cast<const __half*>(b);
    q = reinterpret_cast<const int8_t*>(b)[2 + lane];
  }
  __device__ __forceinline__ void zero() { d = __float2half(0.f), q = 0; }
  __device__ __forceinline__ float value() const { return __half2float(d) * float(q); }
};

// Elements e .. e + 3 (e % 4 == 0, base 16-byte aligned): one 16-byte load for f32, one 8-byte
// load for the 16-bit types, one 4-byte-aligned pair of 2-byte loads plus the scale for q8_0.
template <KvForm F>
__device__ __forceinline__ float4 kv_load4(const uint8_t* base, int64_t e, DType rt = DType::F32) {
  if constexpr (F == KvForm::kF32) {
    return reinterpret_cast<const float4*>(base)[e >> 2];
  } else if constexpr (F == KvForm::kF16) {
    const uint2 u = reinterpret_cast<const uint2*>(base)[e >> 2];
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
  } else if constexpr (F == KvForm::kBF16) {
    const uint2 u = reinterpret_cast<const uint2*>(base)[e >> 2];
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
  } else if constexpr (F == KvForm::kQ8_0) {
    const uint8_t* b = base + (e >> 5) * kQ8Bytes;
    const float d = __half2float(*reinterpret_cast<const __half*>(b));
    // The quants sit at an even offset (2 + 34k + e % 32): two 2-byte loads.
    const auto* qs = reinterpret_cast<const char2*>(b + 2 + (e & 31));
    const char2 lo = qs[0], hi = qs[1];
    return make_float4(d * float(lo.x), d * float(lo.y), d * float(hi.x), d * float(hi.y));
  } else {
    switch (rt) {
      case DType::F16:
        return kv_load4<KvForm::kF16>(base, e);
      case DType::BF16:
        return kv_load4<KvForm::kBF16>(base, e);
      case DType::Q8_0:
        return kv_load4<KvForm::kQ8_0>(base, e);
      default:
        return kv_load4<KvForm::kF32>(base, e);
    }
  }
}

// Stores v as element e of rows of type t, for the plain types (F32, F16, BF16), rounded to
// nearest even as the CPU's f32_to_fp16 / f32_to_bf16.
__device__ __forceinline__ void kv_store_plain(uint8_t* base, int64_t e, float v, DType t) {
  if (t == DType::F16)
    reinterpret_cast<__half*>(base)[e] = __float2half_rn(v);
  else if (t == DType::BF16)
    reinterpret_cast<__nv_bfloat16*>(base)[e] = __float2bfloat16_rn(v);
  else
    reinterpret_cast<float*>(base)[e] = v;
}

// v as rows of plain type t hold it once kv_store_plain stored it, read back as f32.
__device__ __forceinline__ float kv_round_plain(float v, DType t) {
  if (t == DType::F16) return __half2float(__float2half_rn(v));
  if (t == DType::BF16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

// Warp-collective q8_0 quantization of a 32-element block, lane l holding element l, as the
// CPU's quantize_q8_0: d = amax / 127 (stored as fp16), q = round(x * (1 / d)), each step
// IEEE-rounded as on the CPU.
struct Q8Lane {
  float d;
  int8_t q;
};
__device__ __forceinline__ Q8Lane q8_quantize_warp(float v) {
  const float amax = warp_max(fabsf(v));
  const float d = __fdiv_rn(amax, 127.f);
  const float id = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
  const float r = fminf(fmaxf(roundf(__fmul_rn(v, id)), -127.f), 127.f);
  return {d, int8_t(r)};
}

// Warp-collective store of element e = 32 * block + lane of rows of type t (every lane of the
// warp active; rows of whole 32-element blocks for q8_0).
__device__ __forceinline__ void kv_store_warp(uint8_t* base, int64_t e, float v, DType t,
                                              int lane) {
  if (t != DType::Q8_0) return kv_store_plain(base, e, v, t);
  const Q8Lane x = q8_quantize_warp(v);
  uint8_t* b = base + (e >> 5) * kQ8Bytes;
  reinterpret_cast<int8_t*>(b)[2 + lane] = x.q;
  if (lane == 0) *reinterpret_cast<__half*>(b) = __float2half_rn(x.d);
}

// v as rows of type t hold it once stored (kv_store_warp's rounding), read back as f32; the
// same warp conditions.
__device__ __forceinline__ float kv_round_warp(float v, DType t) {
  switch (t) {
    case DType::Q8_0: {
      const Q8Lane x = q8_quantize_warp(v);
      return __half2float(__float2half_rn(x.d)) * float(x.q);
    }
    default:
      return kv_round_plain(v, t);
  }
}

// Byte offset of element e in rows of type t (the row layout of kernels::kv_row_bytes).
__host__ __device__ __forceinline__ int64_t kv_byte_offset(DType t, int64_t e) {
  if (t == DType::Q8_0) return e / 32 * kQ8Bytes;
  return e * (t == DType::F32 ? 4 : 2);
}

}  // namespace hearth::cuda
