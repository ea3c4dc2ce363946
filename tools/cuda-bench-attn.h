// hearth-cuda-bench's decode attention table (cuda-bench-attn.cpp).
#pragma once

#include <cuda_runtime_api.h>

namespace hearth::cuda_bench {

// One decode token's attention for one layer of llama2-7b (32 heads x 128) and of Llama 3 8B
// (32 q / 8 kv heads) at depths 512 .. 32768, f16 and q8_0 caches, rope and the int8 output
// fused as in a decode step: the split kernel against launch_attention's dispatch (the decode
// kernel), as time and GB/s of the K and V bytes read, against copy_gbs. False on an error.
// depth > 0: that depth alone; kv: "f16" or "q8_0" alone (null: both); shape >= 0: that row of
// the shape table alone (0 llama2-7b, 1 llama3-8b); batch > 0 (the B-sequence table): that many
// sequences alone. For ncu runs of one case.
struct AttnFilter {
  long long depth = 0;
  long long batch = 0;
  const char* kv = nullptr;
  int shape = -1;
};
bool decode_attention_table(cudaStream_t s, double copy_gbs, const AttnFilter& only = {});

// One layer's decode attention for a step of B sequences (launch_attention_batch: attention and
// combine) at B 8 / 32 / 64 and depths 150 / 512 / 2048, f16 and q8_0 caches, llama2-7b and Llama
// 3 8B heads (or what `only` picks, any B and depth): the decode kernels against the chunked
// kernel, us and GB/s of K and V.
bool batch_attention_table(cudaStream_t s, double copy_gbs, const AttnFilter& only = {});

}  // namespace hearth::cuda_bench
