// The decode step of many sequences (Phase::kDecodeBatch) on CUDA: the batched int8 matmul
// (matmul-batch.cu) and the multi-segment RoPE + K/V append (rope-batch.cu) and attention
// (attention-batch.cu).
// Apart from cuda-ops.h so the other kernels do not rebuild when these change.
#pragma once

#include "kernels/cuda/cuda-ops.h"

namespace hearth::cuda {

// Batched decode matmul on the int8 tensor cores (matmul-batch.cu): a decode step of several
// sequences, y [T, rows] = x @ W^T (+ add_to += y) for each job, every weight byte read once per
// 64 tokens. Same dtype and cols for every job (1..3), 1 <= T <= kMatmulBatchMaxTokens, x in the
// GEMV's QuantizedActs. Long rows split over several blocks: `workspace` then holds their
// partial sums (matmul_batch_workspace_bytes(); 0 when not split).
constexpr int64_t kMatmulBatchMaxTokens = 256;
// Prefill passes of up to this many tokens take it too: the GEMM path converts the whole W to
// fp16 each call, which made a 16- or 100-token prompt cost as much as a 512-token one. H200,
// Q4_0, us for 4096x4096 / 11008x4096 / 4096x11008, batched against GEMM: 16 tokens 12 / 19 / 27
// against 25 / 64 / 66; 64: 23 / 35 / 51 against 25 / 65 / 69; 128: 25 / 62 / 54 against
// 31 / 67 / 74; 256: 44 / 114 / 97 against 35 / 74 / 85. (A weight with an fp16 copy,
// DeviceWeight::w16, takes the GEMM from 65 tokens: the backend's kHalfCopyMinTokens.)
constexpr int64_t kMatmulBatchPrefillMaxTokens = 128;
bool matmul_batch_supports(DType t);  // the dtypes it has
// This weight: a dtype it has, cols % 128 == 0 and its arrays aligned for 16-byte copies.
bool matmul_batch_supports(const DeviceWeight& w);
size_t matmul_batch_workspace_bytes(const GemvJob* jobs, int n_jobs, int64_t n_tokens);
cudaError_t launch_matmul_batch(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa,
                                void* workspace, size_t workspace_bytes, cudaStream_t s);
// The same product on fp16 tensor cores, from kMatmulBatchHalfMinTokens tokens on (where the
// int8 form's per-block scale arithmetic costs more than dequantizing W to fp16 once for all
// tokens): x as launch_batch_x_half wrote it (batch_x_half_bytes()), f32 accumulation. Up to
// kMatmulBatchStreamedMaxTokens tokens each lane streams its weight blocks straight into
// registers and K splits add up through a cluster's shared memory (matmul-batch-half.cu; no
// workspace); above, and at 33-64 tokens where the matrices have few row tiles
// (matmul_batch_half_staged()), the int8 form's staged kernel runs on fp16 MMAs (_staged, its
// workspace). H200, Q4_0, us for 4096x4096 / 11008x4096 / 4096x11008, streamed against staged:
// 32 tokens 10.6 / 17.4 / 22.1 against 11.0 / 26.1 / 23.9; 64: 19.8 / 30.8 / 41.6 against
// 15.1 / 31.9 / 29.1 (two steps in flight, one wave of K splits).
constexpr int64_t kMatmulBatchHalfMinTokens = 17;
constexpr int64_t kMatmulBatchStreamedMaxTokens = 64;
bool matmul_batch_half_staged(const GemvJob* jobs, int n_jobs, int64_t n_tokens);
size_t batch_x_half_bytes(int64_t n_tokens, int64_t cols);
cudaError_t launch_batch_x_half(const float* x, int64_t n_tokens, int64_t cols, void* out,
                                cudaStream_t s);
cudaError_t launch_matmul_batch_half(const GemvJob* jobs, int n_jobs, const void* xh,
                                     int64_t n_tokens, int64_t cols, void* workspace,
                                     size_t workspace_bytes, cudaStream_t s);
// An RMSNorm between two matmuls of a decode step folded into both launches. The first (one job
// adding to the residual: the O or down projection; the copy-engine form, or the staged form's
// K-split reduction, folded-norm.cuh either way) writes, besides y and the residual, next_xh =
// fp16(residual * w * s) (launch_batch_x_half's order; s per token: the last norm's rsqrt, so
// the rows stay near unit scale) and ss [n_tok, tiles of 128 rows]: each tile's sum of squares
// of the new residual. The next (x = that next_xh: Q/K/V, gate/up) multiplies its sums by
// rsqrt(sum of the token's ss_in / n + eps) / s_in and writes that rsqrt to r_out (the s of the
// norm after). The residual's normed floats are never written.
struct FoldedNorm {
  const float* w = nullptr;      // first: the norm's weight [d]
  const float* s = nullptr;      // first: [n_tok]
  void* next_xh = nullptr;       // first: [n_tok, d] fp16
  float* ss = nullptr;           // first: [n_tok, tiles]
  const float* ss_in = nullptr;  // next: [n_tok, ss_tiles]
  const float* s_in = nullptr;   // next: [n_tok]
  float* r_out = nullptr;        // next: [n_tok]
  int ss_tiles = 0;              // next
  int n = 0;                     // next: the norm's width
  float eps = 0;                 // next
};
// Whether the first matmul of a folded norm takes this job (17-64 tokens, Q4_0 / Q4_K, rows % 4).
bool matmul_batch_tma_norm_takes(const GemvJob& job, int64_t n_tokens);
// The first matmul of a folded norm where matmul_batch_tma_norm_takes(): the staged form where
// the plain product takes it and it has K splits (matmul_batch_staged_norm_takes; its
// workspace: matmul_batch_workspace_bytes), else the copy-engine form. One job adding to the
// residual; norm's first-matmul fields set.
cudaError_t launch_matmul_batch_half_norm(const GemvJob& job, const void* xh, int64_t n_tokens,
                                          int64_t cols, void* workspace, size_t workspace_bytes,
                                          cudaStream_t s, const FoldedNorm& norm);

// The same product with W and x brought into shared memory by the copy engine (TMA) in a ring
// of stages (matmul-batch-tma.cu; sm_90): Q4_0 and Q4_K, cols % 256 == 0, 17-32 tokens, and
// 33-64 where the row tiles of two token groups fill the SMs; no workspace.
// launch_matmul_batch_half takes it wherever matmul_batch_tma_takes().
bool matmul_batch_tma_takes(const GemvJob* jobs, int n_jobs, int64_t n_tokens, int64_t cols);
cudaError_t launch_matmul_batch_half_tma(const GemvJob* jobs, int n_jobs, const void* xh,
                                         int64_t n_tokens, int64_t cols, cudaStream_t s,
                                         const FoldedNorm* norm = nullptr);
// The FFN's gated half in the copy-engine form: out [T, n_ff] = act(x . W_gate^T) * (x . W_up^T),
// each block's row tile 64 rows of W_gate over the same 64 of W_up so one epilogue has both
// sums (the plain form's bits), and out's fp16 form for the down projection in out_xh
// (launch_batch_x_half's order). Where the plain form would take both jobs, W_gate and W_up of
// one shape, n_ff % 4 == 0.
enum class GatedForm { kSilu, kGeluTanh };
bool matmul_batch_tma_gated_takes(const DeviceWeight& gate, const DeviceWeight& up,
                                  int64_t n_tokens);
cudaError_t launch_matmul_batch_tma_gated(const DeviceWeight& gate, const DeviceWeight& up,
                                          GatedForm act, const void* xh, int64_t n_tokens,
                                          float* out, void* out_xh, cudaStream_t s,
                                          const FoldedNorm* norm = nullptr);
// launch_matmul_batch_half without the copy-engine form (hearth-cuda-bench's comparison).
cudaError_t launch_matmul_batch_half_streamed(const GemvJob* jobs, int n_jobs, const void* xh,
                                              int64_t n_tokens, int64_t cols, void* workspace,
                                              size_t workspace_bytes, cudaStream_t s);
cudaError_t launch_matmul_batch_half_staged(const GemvJob* jobs, int n_jobs, const void* xh,
                                            int64_t n_tokens, int64_t cols, void* workspace,
                                            size_t workspace_bytes, cudaStream_t s,
                                            const FoldedNorm* norm = nullptr);
// Whether the staged form (where matmul_batch_half_staged() picks it) takes this job as the
// first matmul of a folded norm: K splits, whose reduction pass then writes the residual,
// next_xh and ss as the copy-engine form does (one job adding to the residual, rows % 4).
bool matmul_batch_staged_norm_takes(const GemvJob& job, int64_t n_tokens);

// A decode step of many sequences, one query each (attention-batch.cu). Segment i's rows of q,
// k, v and out are row i of [n_segs, heads * head_dim]; its descriptor (device memory) names its
// cache rows ([ctx, n_kv_heads * head_dim] of cache_type, the same for every segment: F32, F16,
// BF16 or Q8_0, kernels::KvRows' layout) and its position.
struct AttnSegment {
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int32_t pos = 0;  // this token's position: appended at row pos, attends rows 0..pos
};
bool attention_batch_supported(int64_t head_dim, int64_t n_heads, int64_t n_kv_heads);
// RoPE (full, head_dim even; rope-batch.cu) on every segment's q [nq heads] and k [nk heads]
// at its position, then k and v stored to its cache row pos: one launch for all segments (f32,
// f16 and bf16 rows), two for q8_0 (its store is warp-collective). ring_rows > 0: a sliding
// layer's ring, position p in row p % ring_rows; mscale: cos and sin times it (YaRN, LongRoPE).
cudaError_t launch_rope_kv_batch(float* q, int64_t nq, float* k, int64_t nk, const float* v,
                                 int64_t head_dim, const AttnSegment* segs, int64_t n_segs,
                                 DType cache_type, const float* inv_freq, int style, cudaStream_t s,
                                 int ring_rows = 0, float mscale = 1.f);
// Causal GQA attention of each segment's query over its rows 0..pos (max_ctx > every pos),
// by one of two kernels: the single-token decode kernels (attention-decode*.cu: a block per KV
// head's group of query heads and split, the tensor cores for f16 and q8_0 at head size 64 and
// 128, a grid z-dimension of segments; f16, bf16 and q8_0 caches of head size 64-256) or the
// chunked kernel (attention-batch.cu: split-K over 64-position chunks, a warp's dot per key,
// then a combine launch; every cache type). The decode kernels where they are faster (GQA,
// q8_0 rows, few sequences over short contexts: attention-batch.cu's decode_kernels_take), else
// the chunked one.
// partials holds attention_batch_partials_floats() floats, its first
// attention_counter_slots(n_segs, n_heads) words zero before a launch (every launch leaves them
// zero). xh (optional, batch_x_half_bytes(n_segs, n_heads * head_dim)): out's fp16 form is also
// written, as launch_batch_x_half would. mask: AttnKv's sinks, window, ring rows and soft-cap
// (its types unused: cache_type), which only the decode kernels take: a masked step runs them
// (kChosen), and asking another kernel for one is an error. rope (rope.k set): each segment's
// q and k rows not yet rotated (and normed, with q_norm / k_norm), k and v not yet in the caches
// (rope.k / rope.v: [n_segs, n_kv_heads, head_dim]); the kernel rotates them and appends k and
// v as launch_rope_kv_batch would, in the attention launch. Only where
// attention_batch_takes_rope(); q's contents are undefined afterwards.
int64_t attention_batch_partials_floats(int64_t n_segs, int64_t n_heads, int64_t head_dim,
                                        int64_t max_ctx);
// Which kernel: the faster for the step (the default), or one of them wherever it applies
// (hearth-cuda-bench's comparison): the decode kernels, the chunked kernel (a warp a chunk
// where the rows allow, else a block a 64-position chunk), its block form always, or the warp
// form's merged blocks (a block a segment's query head, its warps splitting the positions and
// merging in shared memory: no combine launch; where the warp form does not apply, the chunked
// kernel).
// warp_chunk (a multiple of 64; 0: chosen from the step's shape): the warp form's positions a
// warp.
enum class BatchAttnKernel { kChosen, kDecode, kChunked, kChunkedBlocks, kMerged };
cudaError_t launch_attention_batch(const float* q, float* out, const AttnSegment* segs,
                                   int64_t n_segs, int64_t max_ctx, int64_t n_heads,
                                   int64_t n_kv_heads, int64_t head_dim, DType cache_type,
                                   float scale, float* partials, cudaStream_t s, void* xh = nullptr,
                                   BatchAttnKernel kernel = BatchAttnKernel::kChosen,
                                   int warp_chunk = 0, const AttnKv& mask = {},
                                   const AttnRope& rope = {});
// Whether launch_attention_batch takes the RoPE and K/V append for such a step (its rope, with
// rope's style and norms set; the pointers are not looked at): on the decode kernels (for
// kChosen: the faster pick, every masked step) where attention_rope_fusable(1, head_dim, style),
// and on the warp form's merged blocks (one query head a KV head, f32 / f16 / bf16 rows) where
// there are no per-head norms.
bool attention_batch_takes_rope(int64_t n_segs, int64_t n_heads, int64_t n_kv_heads,
                                int64_t head_dim, DType cache_type, int64_t max_ctx, bool masked,
                                const AttnRope& rope,
                                BatchAttnKernel kernel = BatchAttnKernel::kChosen);

}  // namespace hearth::cuda
