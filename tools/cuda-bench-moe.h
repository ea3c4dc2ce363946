// hearth-cuda-bench's MoE decode table (cuda-bench-moe.cpp).
#pragma once

#include <cuda_runtime_api.h>

namespace hearth::cuda_bench {

// One MoE layer of Qwen3-30B-A3B's shape (128 experts, top-8, 2048 / 768) and of Mixtral-8x7B's
// (8 experts, top-2, 4096 / 14336) in Q4_K, Q4_0 and Q8_0 (those in `only` when set), one token:
// gate+up and down of the f32 gather-GEMVs and of the int8 ones, as time and GB/s of the routed
// expert bytes. False on an error.
bool moe_decode_table(cudaStream_t s, const char* only);

}  // namespace hearth::cuda_bench
