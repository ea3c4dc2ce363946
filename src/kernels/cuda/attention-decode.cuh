// The single-token decode attention kernel (attention-decode.cu) as launch_attention uses it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda-ops.h"

namespace hearth::cuda {

constexpr int kDecodeMaxSplits = 64;  // split blocks per row (a multiple of 32)

// Where the output's int8 activations go (launch_attention's qbuf), null q1: none.
struct DecodeQuantOut {
  int8_t* q1 = nullptr;
  int8_t* q2 = nullptr;
  float4* scales = nullptr;
};

// Whether the decode kernel takes this cache: head_dim 64 / 128 / 256, K and V both f16, bf16
// or q8_0, 16-byte aligned bases.
bool attention_decode_supported(int64_t head_dim, DType k, DType v, const void* k_cache,
                                const void* v_cache);
// Its splits per row for contexts up to max_ctx (<= kDecodeMaxSplits).
int64_t attention_decode_splits(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                int64_t max_ctx);
// One query token at pos0 (pos0_dev overrides it on the device), launch_attention's contract;
// rope.k null: no fused rope. counters: the per-row words at the front of partials, partials
// the floats after them.
cudaError_t launch_attention_decode(const float* q, void* k_cache, void* v_cache, float* out,
                                    int64_t pos0, const int32_t* pos0_dev, int64_t max_ctx,
                                    int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                    float scale, float* partials, unsigned* counters,
                                    cudaStream_t s, DecodeQuantOut qo, const AttnRope& rope,
                                    const AttnKv& kv);

}  // namespace hearth::cuda
