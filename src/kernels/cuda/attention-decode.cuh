// The single-token decode attention kernel (attention-decode.cu) as launch_attention uses it,
// and its probe for the bench and tests (host code may include this).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/decode-batch.h"

namespace hearth::cuda {

constexpr int kDecodeMaxSplits = 64;  // split blocks per row (a multiple of 32)

// Where the output's int8 activations go (launch_attention's qbuf), null q1: none.
struct DecodeQuantOut {
  int8_t* q1 = nullptr;
  int8_t* q2 = nullptr;
  float4* scales = nullptr;
};

// A decode step of many sequences through the decode kernels (launch_attention_decode_batch):
// block z takes segment segs[z] (its caches and position; its rows of q and out at z * n_heads *
// head_dim; its partials and counters after those of the segments before it) and, with xh set,
// also writes its output's fp16 form for the O projection's batched matmul (batch_half_index of
// the flat index, as launch_batch_x_half). segs null: one sequence, launch_attention's contract.
struct DecodeSegments {
  const AttnSegment* segs = nullptr;
  void* xh = nullptr;  // __half
};

// hearth-cuda-bench's probes of the grid (launch_attention_probe): splits per row (0: one
// wave of the blocks the SMs hold) and tiles dealt in contiguous runs instead of round-robin.
struct DecodeProbe {
  int splits = 0;
  bool runs = false;
  bool scalar = false;  // the scalar kernel even where the tensor-core one applies
};

// Splits per row: one wave of every block the SMs hold at once (blocks_per_sm, the occupancy of
// the kernel instance), capped by the 16-row tiles of max_ctx.
int64_t decode_splits(int64_t brows, int blocks_per_sm, int64_t max_ctx);

// The tensor-core decode kernel (attention-decode-mma.cu): head_dim 64 / 128, K and V both f16
// or both q8_0.
bool attention_decode_mma_supported(int64_t head_dim, DType k, DType v);

// Whether the decode kernel takes this cache: head_dim 64 / 128 / 256, K and V both f16, bf16
// or q8_0, 16-byte aligned bases.
bool attention_decode_supported(int64_t head_dim, DType k, DType v, const void* k_cache,
                                const void* v_cache);
// One query token at pos0 (pos0_dev overrides it on the device), launch_attention's contract;
// rope.k null: no fused rope. counters: the per-row words at the front of partials, partials
// the floats after them.
cudaError_t launch_attention_decode(const float* q, void* k_cache, void* v_cache, float* out,
                                    int64_t pos0, const int32_t* pos0_dev, int64_t max_ctx,
                                    int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                    float scale, float* partials, unsigned* counters,
                                    cudaStream_t s, DecodeQuantOut qo, const AttnRope& rope,
                                    const AttnKv& kv, DecodeProbe probe = {}, int64_t n_segs = 1,
                                    DecodeSegments segs = {});

// segs (with n_segs of them) set: a step of many sequences, k_cache / v_cache / pos0_dev unused
// (each segment's own), no fused rope, no int8 output.
cudaError_t launch_attention_decode_mma(const float* q, void* k_cache, void* v_cache, float* out,
                                        int64_t pos0, const int32_t* pos0_dev, int64_t max_ctx,
                                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                        float scale, float* partials, unsigned* counters,
                                        cudaStream_t s, DecodeQuantOut qo, const AttnRope& rope,
                                        const AttnKv& kv, DecodeProbe probe, int64_t n_segs = 1,
                                        DecodeSegments segs = {});

// Whether the decode kernels take a step of many sequences with caches of this type (as
// attention_decode_supported; every segment's caches 16-byte aligned, as allocated).
bool attention_decode_batch_supported(int64_t head_dim, DType cache_type);
// Counters (attention_counter_slots(n_segs, n_heads) words) then partials, in floats: what
// launch_attention_decode_batch needs of `partials` at most.
int64_t attention_decode_batch_floats(int64_t n_segs, int64_t n_heads, int64_t head_dim,
                                      int64_t max_ctx);
// Each segment's one query over its cache rows 0..pos (segs in device memory, pos < max_ctx),
// counters at the front of partials (zero before the first launch; every launch leaves them
// zero). xh: as DecodeSegments.
// mask: sinks, window, ring rows and soft-cap (AttnKv's; its types unused). rope: as
// launch_attention_batch's (rope.k / rope.v [n_segs, n_kv_heads, head_dim]).
cudaError_t launch_attention_decode_batch(const float* q, const AttnSegment* segs, int64_t n_segs,
                                          float* out, void* xh, int64_t max_ctx, int64_t n_heads,
                                          int64_t n_kv_heads, int64_t head_dim, DType cache_type,
                                          float scale, float* partials, cudaStream_t s,
                                          const AttnKv& mask = {}, const AttnRope& rope = {});

// One decode token through the decode kernel wherever it applies (f16 / bf16 / q8_0, head_dim
// 64 / 128 / 256; else as launch_attention), its grid probed: decode_splits per row (0: its
// default), tiles in contiguous runs per split instead of round-robin, the scalar kernel where
// the tensor-core one would run (hearth-cuda-bench, the tests; attention.cu).
cudaError_t launch_attention_probe(const float* q, const void* k_cache, const void* v_cache,
                                   float* out, int64_t pos0, const int32_t* pos0_dev,
                                   int64_t max_ctx, int64_t n_heads, int64_t n_kv_heads,
                                   int64_t head_dim, float scale, float* partials, cudaStream_t s,
                                   void* qbuf, const AttnRope* rope, const AttnKv& kv,
                                   int decode_splits, bool decode_runs, bool decode_scalar = false);

}  // namespace hearth::cuda
