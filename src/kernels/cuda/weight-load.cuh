// The decode GEMVs' weight loads: each weight byte is read once per token, so (kStream) it
// bypasses L1, which then keeps x, read by every warp of the SM, from being evicted by the
// weight stream (F16 4096x11008 GEMV 3.42 -> 3.84 TB/s, tg128 261 -> 267 tok/s on the H200).
// The int8 GEMV's dot units (gemv-int8-dot.cuh) read through WeightRead, which adds the rows a
// block has already copied into shared memory (gemv-int8.cu's prefetched kernel).
#pragma once

#include <cstdint>

namespace hearth::cuda {

template <bool kStream>
__device__ __forceinline__ uint4 load_weight16(const uint4* p) {
  if constexpr (!kStream) {
    return __ldg(p);
  } else {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  }
}

// Where a weight word comes from: global memory through L1 (kCached) or past it (kStreamed), or
// shared memory (kShared: the pointer is a generic address into the block's copy).
enum class WeightRead { kCached, kStreamed, kShared };

template <WeightRead kRead>
__device__ __forceinline__ uint4 read_weight16(const uint4* p) {
  if constexpr (kRead == WeightRead::kShared)
    return *p;
  else
    return load_weight16<kRead == WeightRead::kStreamed>(p);
}
// Scales, heads and other side arrays: read-only cache unless they sit in shared memory.
template <WeightRead kRead, class V>
__device__ __forceinline__ V read_aux(const V* p) {
  if constexpr (kRead == WeightRead::kShared)
    return *p;
  else
    return __ldg(p);
}

}  // namespace hearth::cuda
