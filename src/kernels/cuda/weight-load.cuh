// The decode GEMVs' weight loads: each weight byte is read once per token, so (kStream) it
// bypasses L1, which then keeps x, read by every warp of the SM, from being evicted by the
// weight stream (F16 4096x11008 GEMV 3.42 -> 3.84 TB/s, tg128 261 -> 267 tok/s on the H200).
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

}  // namespace hearth::cuda
