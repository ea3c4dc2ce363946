// The CPU op contract: every op the generic forward pass needs, with shapes and preconditions.
// Each op family has one file per backend with the same name (ref/rmsnorm.cpp, cpu/..., cuda/...).
// Conventions (see tensor/tensor-view.h): activations are f32, row-major, tokens outermost;
// weights are TensorViews of shape {d_out, d_in} in any runnable dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/thread-pool.h"
#include "tensor/dtype.h"
#include "tensor/tensor-view.h"

namespace hearth::kernels {

// W {d, n} (any runnable dtype) @ X [T, n] f32 -> Y [T, d] f32. Y must not alias X.
// 4- and 5-bit types quantize X to an 8-bit activation format inside (as ggml does); Q8_0 and
// Q6_K compute with f32 X, since 8-bit activations would double their error
// (docs/performance.md, "What activation quantization costs").
// From a few dozen tokens on, matmul may run a prefill GEMM on the CPU's matrix engine (x86 AMX)
// where the weight dtype's precision allows (cpu/kernel-table.h); `engine` says whether it may
// and from how many tokens. The owner of the call chooses (the CPU backend, from its
// CpuOptions): the kernels read no environment.
struct MatrixEngineOptions {
  bool enabled = true;     // false: the ISA table's kernels for every token count
  int64_t min_tokens = 0;  // > 0: use it from this many tokens for every dtype; 0: measured
};
void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const MatrixEngineOptions& engine = {});
// Several matrices, each with its own input x [n_tokens, w.cols()] and output y [n_tokens,
// w.rows()] (an MoE layer's experts over the tokens routed to each): one hand-out of all their
// rows to the pool, each distinct input quantized once. Same results as one matmul each.
struct MatmulIn {
  const TensorView* w;
  const float* x;
  int64_t n_tokens;
  float* y;
};
void matmul_grouped(std::span<const MatmulIn> mats, ThreadPool& pool,
                    const MatrixEngineOptions& engine = {});

// Packed weights (cpu/packed.cpp): the active ISA may prefer its own layout for a dtype
// (rows interleaved, 64-byte aligned). packed_size is nullopt when it has none for this shape.
// The bytes depend on (active ISA, packed_layout_version): both belong in any cache key.
std::optional<uint64_t> packed_size(DType t, int64_t d, int64_t n);
int packed_layout_version(DType t);
// "avx512:Q4_0v1,..." for the active table: changes whenever any packed byte could.
std::string packed_layouts_signature();
// W {d, n} in the file's layout -> dst (packed_size bytes, 64-byte aligned).
void pack_weight(const TensorView& w, uint8_t* dst, ThreadPool& pool);
// As matmul, for W packed by pack_weight.
void matmul_packed(DType t, const uint8_t* packed, int64_t d, int64_t n, const float* x,
                   int64_t n_tokens, float* y, ThreadPool& pool,
                   const MatrixEngineOptions& engine = {});
// Several packed matrices of the same input x [n_tokens, n] (Q/K/V, gate/up), each into its own
// y: one fork-join for all of them, the activations quantized once per quantizer. Same results
// as one matmul_packed each.
struct PackedMatmul {
  DType dtype;
  const uint8_t* packed;
  int64_t d;
  float* y;
};
void matmul_packed_shared(std::span<const PackedMatmul> mats, int64_t n, const float* x,
                          int64_t n_tokens, ThreadPool& pool,
                          const MatrixEngineOptions& engine = {});
// Packed matrices each with its own input x [n_tokens, n] (an MoE layer's experts, each over the
// tokens routed to it): one fork-join for all of them, each distinct input quantized once per
// quantizer (matrices with the same x and n_tokens share it). Same results as one matmul_packed
// each.
struct PackedMatmulIn {
  PackedMatmul m;
  const float* x;
  int64_t n_tokens;
};
void matmul_packed_grouped(std::span<const PackedMatmulIn> mats, int64_t n, ThreadPool& pool,
                           const MatrixEngineOptions& engine = {});

// One row of n elements of dtype t (n a multiple of its block size) -> f32.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], for each of `rows` rows of n.
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps);

enum class RopeStyle {
  kInterleaved,  // rotate pairs (x[2i], x[2i+1]): llama.cpp's llama layout (Q/K rows permuted)
  kHalves,       // rotate pairs (x[i], x[i + d/2]): HF / NeoX layout
};

// Rotates each head of x [T, n_heads, head_dim] in place; position of token t is pos[t].
// inv_freq [head_dim/2] already includes any scaling (llama3, linear, rope_freqs tensor).
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
          const float* inv_freq, RopeStyle style);

// Causal attention for n_tokens queries at positions pos0 .. pos0+T-1 against a cache that
// holds positions 0 .. pos0+T-1. q [T, n_heads, hd]; k/v cache [ctx, n_kv_heads, hd] f32 with
// row stride n_kv_heads*hd; out [T, n_heads, hd]. GQA: head h reads kv head h / (n_heads/n_kv).
void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, ThreadPool& pool);

// KV cache rows as attention reads them and store_kv_rows writes them: rows of
// n_kv_heads * head_dim elements of `type`, kv_row_bytes(type, n_kv_heads * head_dim) bytes
// apart. Types (llama.cpp's cache types): F32, F16, BF16 and Q8_0 (ggml's block_q8_0: 32
// values, one fp16 scale and 32 int8; a head must be whole blocks, head_dim % 32 == 0). The
// kernels read the rows in place: no dequantized copy of the cache is ever made.
struct KvRows {
  const void* data = nullptr;
  DType type = DType::F32;
};
bool is_kv_type(DType t);
// Bytes of one cache row of n elements (n a multiple of 32 for Q8_0).
int64_t kv_row_bytes(DType t, int64_t n);
// src [n_tokens, n] f32 -> n_tokens rows of type t at dst, rounded as ggml's quantizers do.
void store_kv_rows(DType t, const float* src, void* dst, int64_t n_tokens, int64_t n);
// One cache row of n elements back to f32 (tests, state conversion).
void load_kv_row(DType t, const void* src, float* dst, int64_t n);

// What a family's attention adds to plain causal attention over a linear cache. The default
// value is plain attention: attention(..., AttentionMask{}, pool) == attention(..., pool).
struct AttentionMask {
  int64_t window = 0;     // > 0: a query at position p sees only keys p-window+1 .. p (sliding)
  float softcap = 0;      // > 0: score = softcap * tanh(score / softcap) after the scale (Gemma 2)
  int64_t ring_rows = 0;  // > 0: the cache is a ring of this many rows, position p in row
                          // p % ring_rows; it must hold every key a query of the call sees
                          // (ring_rows >= window + n_tokens - 1)
  // Non-null: one learned logit per query head [n_heads] (gpt-oss's attention sinks). It joins
  // each row's softmax denominator but has no value row: out = sum_j e^s_j v_j / (sum_j e^s_j +
  // e^sink). Lives where the attention runs (backend memory).
  const float* sinks = nullptr;
  bool plain() const { return window == 0 && softcap == 0 && ring_rows == 0 && !sinks; }
};
void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, const AttentionMask& mask, ThreadPool& pool);
// Both over typed cache rows (KvRows; K and V may differ in type). The f32 forms above are these
// with DType::F32 rows.
void attention(const float* q, const KvRows& k_cache, const KvRows& v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, const AttentionMask& mask, ThreadPool& pool);
// Cache bytes a later call will read (the next sequence of a decode step): a one-thread call
// reads a share of them per key block, so they arrive from memory while it computes (the L2
// streamer does not run ahead of attention's strided reads). A hint only: results do not change.
// k, v: the first bytes of each buffer to read, k_bytes / v_bytes long.
struct KvRowsAhead {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_bytes = 0, v_bytes = 0;
};
// As above, reading `ahead` on the way (decode steps of several sequences).
void attention(const float* q, const KvRows& k_cache, const KvRows& v_cache, float* out,
               int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, const AttentionMask& mask, ThreadPool& pool,
               const KvRowsAhead& ahead);
// A decode step of several sequences in one parallel pass: segment i's one query (row i of q
// [n_segs, n_heads, hd] and of out) attends its own cache rows up to its position, under `mask`
// with the segment's ring_rows (the mask's own is not used). The same result as attention() per
// segment with one thread; jobs are whole sequences (cut into kv-head groups only when there are
// fewer than two a thread), so the pool joins once a layer instead of once a sequence. One
// thread runs them in order, each reading the next one's rows ahead (KvRowsAhead).
struct AttentionSegment {
  KvRows k, v;
  int64_t pos = 0;        // the query's position: the cache holds rows for 0..pos
  int64_t ring_rows = 0;  // as AttentionMask::ring_rows, for this segment's cache
};
void attention_segments(const float* q, std::span<const AttentionSegment> segs, float* out,
                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                        const AttentionMask& mask, ThreadPool& pool);

// RoPE on the first n_rot dims of each head only (partial rotary: Phi-4-mini, GPT-NeoX); dims
// [n_rot, head_dim) pass through. The rotated dims are multiplied by mscale (YaRN's and
// LongRoPE's attention factor; 1 = none). inv_freq [n_rot/2]; n_rot even, <= head_dim; the pair
// layout of `style` applies within the first n_rot dims.
void rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                  const int32_t* pos, const float* inv_freq, RopeStyle style, float mscale);

// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// (PyTorch's gelu(approximate="tanh"): Gemma's FFN). out may alias gate or up.
void gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n);

// gpt-oss's clamped SwiGLU: g = min(gate[i], limit), u = clamp(up[i], -limit, limit),
// out[i] = (u + 1) * g * sigmoid(alpha * g). limit > 0. out may alias gate or up.
void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha,
                    float limit);

// x[i] = cap * tanh(x[i] / cap), cap > 0 (Gemma 2's final logit soft-cap).
void softcap(float* x, int64_t n, float cap);

// x[i] *= s (Gemma's embedding scale).
void scale(float* x, int64_t n, float s);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

// rows of y [rows, n] += bias [n]
void add_bias(float* y, const float* bias, int64_t rows, int64_t n);

// In-place numerically stable softmax over n.
void softmax(float* x, int64_t n);

// The index of the largest x[i] (the first of equal ones; NaN is never picked), 0 when no entry
// is above -inf or n == 0: the greedy pick over a logits row (cpu/argmax.cpp).
int32_t argmax(const float* x, int64_t n);

// Mixture-of-experts routing. logits [T, n_expert] (the router's output) -> experts / weights
// [T, k]: softmax over all n_expert logits (NaN counts as probability 0), the k largest
// probabilities in descending order (ties: the lower expert index first), divided by their sum
// when `renormalise` (Mixtral; Qwen3-MoE's norm_topk_prob). Precondition: 1 <= k <= n_expert.
// Every backend's router (CUDA's on the device) follows this rule.
void route_top_k(const float* logits, int64_t T, int64_t n_expert, int64_t k, bool renormalise,
                 int32_t* experts, float* weights);

// The gated activation of an FFN's experts (Backend::MoeBlock names it by this type too).
enum class GatedAct { kSilu, kGeluTanh, kSwigluClamped };

// A routed MoE layer's experts on the CPU (cpu/moe-experts.cpp). Experts are looked up through
// `matrix` (and `bias`, when set; it may return nullptr) only for those selected, so the caller
// builds no per-call tables. A matrix comes in the file's layout and, when pack_weight packed it
// (the active table's layout), with those bytes too.
enum class ExpertProj { kGate, kUp, kDown };
struct ExpertMatrix {
  const TensorView* w;    // {n_ff, n_embd} for gate and up, {n_embd, n_ff} for down
  const uint8_t* packed;  // pack_weight's bytes of w, or nullptr
};
struct MoeExperts {
  int64_t n_embd = 0, n_ff = 0, n_expert = 0, n_used = 0;
  const void* ctx = nullptr;
  ExpertMatrix (*matrix)(const void* ctx, ExpertProj p, int64_t expert) = nullptr;
  const float* (*bias)(const void* ctx, ExpertProj p, int64_t expert) = nullptr;  // [rows]
  GatedAct act = GatedAct::kSilu;
  float swiglu_alpha = 0, swiglu_limit = 0;  // kSwigluClamped's
};
// x [T, n_embd], routed by route_top_k's ids / weights [T, n_used]:
//   out[t] (+)= sum_j weights[t, j] * down_e . act(gate_e . x_t + bg_e, up_e . x_t + bu_e) + bd_e
// with e = ids[t, j], the experts added in ascending id order (Backend::moe_ffn's default order,
// so the same rounding). Tokens are grouped by expert; all selected experts' gate/up run as one
// grouped matmul, then all downs as another. out must not alias x.
void moe_experts(const MoeExperts& m, const float* x, int64_t T, const int32_t* ids,
                 const float* weights, float* out, bool accumulate, ThreadPool& pool,
                 const MatrixEngineOptions& engine = {});

}  // namespace hearth::kernels
