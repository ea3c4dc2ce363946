// Hopper's bulk copies (TMA, sm_90): one thread asks the copy engine for a contiguous range of
// global memory into shared memory, and the block waits on an mbarrier that counts the bytes as
// they land. Unlike cp.async or plain loads, the copy takes no load slots of the issuing warp
// and none of the SM's L1 miss queue, so it can run while a kernel sits in its PDL wait without
// holding up the loads of the kernel still running on the SM.
#pragma once

#include <cstdint>

namespace hearth::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread: the barrier expects one arrival (the issuing thread's expect_bytes()).
__device__ __forceinline__ void bulk_barrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)));
  // The copy engine (the async proxy) must see the initialised barrier.
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The issuing thread's arrival, with the bytes the copies of this phase will deliver.
__device__ __forceinline__ void bulk_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// bytes % 16 == 0, both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes,
                                                    uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Until the barrier's phase `parity` has completed (every expected byte landed).
__device__ __forceinline__ void bulk_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
}

}  // namespace hearth::cuda
