// The CUDA op launchers: host-callable entry points for every kernel in src/kernels/cuda/*.cu.
// Shapes and semantics are kernels/ops.h's; to add an op, declare its launcher here, one .cu per
// family.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

typedef struct cublasContext* cublasHandle_t;

namespace hearth::cuda {

// A weight matrix {rows, cols} in device memory, in the packed layout of packed_layout():
// 16-byte-aligned block bodies (quants) in `body`, small per-block fields split out into
// aux arrays so no load straddles a block boundary. Plain and 16-byte-sized blocks (F32, F16,
// BF16, Q4_K, Q5_K) keep ggml's bytes unchanged in `body`.
struct DeviceWeight {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t blocks_per_row = 0;
  const uint8_t* body = nullptr;
  const uint32_t* aux0 = nullptr;  // Q4_1/Q5_1: d|m<<16; Q5_0/Q5_1: qh (aux0) and d|m (aux1)
  const uint32_t* aux1 = nullptr;
  const uint16_t* aux16 = nullptr;  // fp16 scale d (Q4_0, Q5_0, Q8_0, Q6_K)
  const uint4* aux_head = nullptr;  // Q4_K: each super-block's 16-byte head (d, dmin, scales)
  // F16/BF16 only, optional: an e4m3 copy of W and its device scale (gemm-fp8.h); prefill GEMMs
  // then run the x_lo correction pass in FP8 instead of a second fp16 pass.
  const uint8_t* w8 = nullptr;
  const float* w8_scale = nullptr;
  // Quantized dtypes only, optional: W dequantized to fp16 once ({rows, cols} row-major, what
  // launch_weight_to_f16 writes); prefill GEMMs then read it instead of dequantizing W per call.
  const uint16_t* w16 = nullptr;
};

// The K and V cache rows an attention kernel reads (or the append writes): their element types
// (kernels::KvRows' types and row layout, kernels::kv_row_bytes apart: F32, F16, BF16, Q8_0 with
// head_dim % 32 == 0; K and V may differ) and gpt-oss's attention sinks [n_heads] in device
// memory (AttentionMask::sinks; null: none). window, ring_rows and softcap are AttentionMask's:
// only the single-token decode kernels (attention-decode.cuh) take them; launch_attention
// refuses them where another kernel would run (launch_attention_masked serves those).
struct AttnKv {
  DType k = DType::F32;
  DType v = DType::F32;
  const float* sinks = nullptr;
  int window = 0;     // > 0: the query at p sees keys p - window + 1 .. p
  int ring_rows = 0;  // > 0: position p sits in row p % ring_rows (needs window <= ring_rows)
  float softcap = 0;  // > 0: score = softcap * tanh(score / softcap) after the scale
  bool masked() const { return window > 0 || ring_rows > 0 || softcap > 0; }
};

struct PackedLayout {
  size_t body_offset = 0, aux0_offset = 0, aux1_offset = 0, aux16_offset = 0, head_offset = 0;
  size_t total_bytes = 0;
  bool needs_repack = false;  // false: the raw ggml bytes are the packed layout
};

// Kernel modules (kernel-modules.cuh): each .cu file registers one kernel of its module at
// static initialization; preload_kernel_modules() then loads every kernel of every registered
// module onto the current device now instead of at its first launch. cudaErrorNotSupported: the
// driver predates CUDA 12.4's explicit loading (kernels then load on first launch, as before).
struct KernelPreload {
  int modules = 0;    // modules visited
  int functions = 0;  // their kernels
  int loaded = 0;     // of those, loaded by this call (the rest were already)
};
bool register_kernel_module(const void* anchor_kernel);
cudaError_t preload_kernel_modules(KernelPreload* out);

bool supports_dtype(DType t);
PackedLayout packed_layout(DType t, int64_t rows, int64_t cols);
DeviceWeight make_device_weight(DType t, int64_t rows, int64_t cols, const uint8_t* packed);

// raw: ggml blocks exactly as in the file (device memory); packed: packed_layout() bytes.
cudaError_t launch_repack(DType t, const uint8_t* raw, uint8_t* packed, int64_t rows, int64_t cols,
                          cudaStream_t s);

// Rows ids[t] of `table` dequantized to f32: out [T, cols]. ids are device int32.
cudaError_t launch_embed(const DeviceWeight& table, const int32_t* ids, int64_t n_tokens,
                         float* out, cudaStream_t s);

// Decode activations for the integer GEMV (gemv-int8.cu): x [T, cols] in int8 blocks of 32,
// q1 = round(x/d1) and the residual level q2 = round((x - d1*q1)/d2), so one-level dtypes read
// q1 alone and Q8_0/Q6_K read both (f16-level accuracy; one level doubles their KLD).
struct QuantizedActs {
  const int8_t* q1 = nullptr;
  const int8_t* q2 = nullptr;
  const float* scales = nullptr;  // float4 per block: d1, d2, 0, d1*sum(q1)
  int64_t n_tokens = 0, cols = 0;
};
bool uses_int8_gemv(DType t);
size_t quantized_acts_bytes(int64_t n_tokens, int64_t cols);
// cols % 32 == 0; buf holds quantized_acts_bytes(); *out views it.
cudaError_t launch_quantize_acts(const float* x, int64_t n_tokens, int64_t cols, void* buf,
                                 QuantizedActs* out, cudaStream_t s);
// The QuantizedActs layout inside a quantized_acts_bytes() buffer (producers that quantize in
// their epilogue write through it).
QuantizedActs quantized_acts_view(void* buf, int64_t n_tokens, int64_t cols);
// y [T, rows] = x @ W^T for a uses_int8_gemv() dtype, 1 <= T <= kGemvMaxTokens.
cudaError_t launch_gemv_int8(const DeviceWeight& w, const QuantizedActs& xa, float* y,
                             cudaStream_t s);

// Up to three decode GEMVs over the same x in one launch (Q/K/V, gate/up), each with an optional
// fused residual add: y = x @ W^T and, when add_to is set, add_to += y.
struct GemvJob {
  DeviceWeight w;
  float* y = nullptr;
  float* add_to = nullptr;
};
struct GemvBatch {
  GemvJob jobs[3];
  unsigned block_end[3] = {0, 0, 0};  // cumulative blocks (kGemvRowsPerBlock rows each)
  int n_jobs = 0;
};
constexpr int64_t kGemvRowsPerBlock = 16;
// split: warps per row group (1, 2 or 4), so a block takes kGemvRowsPerBlock / split rows.
GemvBatch make_gemv_batch(const GemvJob* jobs, int n_jobs, int split = 1);
// One-token GEMVs with rows of several steps split each row group's steps over 2 or 4 warps
// (more loads in flight per SM, fewer serial steps) while the grid stays under 4096 blocks:
// the float GEMV up to 4, the int8 one up to 2 for Q8_0 only.
int gemv_split(const GemvJob* jobs, int n_jobs, int64_t steps, bool int8);
// Blocks per SM the one-token int8 GEMV of dtype t over grid_blocks blocks is compiled for: 4
// for Q8_0, 3 for Q4_K grids of several waves, else 1 (no bound).
int gemv_min_blocks(DType t, int64_t grid_blocks);
// How a one-token int8 GEMV reads its weights: each block copies its rows into shared memory
// before it waits for the kernel before (kCopiedAhead: Q6_K rows that fit, where it was measured
// faster, gemv-int8.cu), or loads them after the wait (kLoadedAfterWait; every other case).
enum class GemvWeights { kCopiedAhead, kLoadedAfterWait };
// The shared memory a block of the kCopiedAhead kernel takes for dtype t's rows of `cols` (0:
// those rows are loaded after the wait whatever is asked).
int64_t gemv_ahead_smem_bytes(DType t, int64_t cols);
// Same dtype and cols for every job; 1 <= n_jobs <= 3.
cudaError_t launch_gemv_int8_multi(const GemvJob* jobs, int n_jobs, const QuantizedActs& xa,
                                   cudaStream_t s, GemvWeights weights = GemvWeights::kCopiedAhead);
// Plain dtypes (F32/F16/BF16, cols % 8 == 0), x f32 [T, cols], T <= kGemvMaxTokens.
cudaError_t launch_gemv_float_multi(const GemvJob* jobs, int n_jobs, const float* x,
                                    int64_t n_tokens, cudaStream_t s);

// Decode fusions (fused.cu). Each writes its f32 output exactly as the unfused op and, with
// `qbuf` set (a quantized_acts_bytes(rows, n) buffer, n % 32 == 0), the int8 activations of that
// output for the next GEMV.
cudaError_t launch_rmsnorm_quant(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                                 float eps, void* qbuf, cudaStream_t s);
cudaError_t launch_swiglu_quant(const float* gate, const float* up, float* out, int64_t rows,
                                int64_t n, void* qbuf, cudaStream_t s);
cudaError_t launch_gelu_tanh_gated_quant(const float* gate, const float* up, float* out,
                                         int64_t rows, int64_t n, void* qbuf, cudaStream_t s);
// The sandwich norms' step between blocks (post-norm.cu): x += rmsnorm(y) * w_post, then, with
// w_next, xn = rmsnorm(x) * w_next, one block a row of n floats, bit for bit what launch_rmsnorm
// (in place on y), launch_add_inplace and launch_rmsnorm_quant / launch_rmsnorm give for one row.
// qbuf (quantized_acts_bytes(rows, n), n % 32 == 0) or xh (batch_x_half_bytes(rows, n)): xn's
// int8 or fp16 form for the next matmul (w_next only). xn may be y; x may alias neither. Rows
// must be post_norm_add_fits(n) and 16-byte aligned; y's contents afterwards are undefined
// unless it is xn.
bool post_norm_add_fits(int64_t n);
cudaError_t launch_post_norm_add(float* y, const float* w_post, float* x, int64_t rows, int64_t n,
                                 float eps, const float* w_next, float* xn, void* qbuf, void* xh,
                                 cudaStream_t s);
// One decode token: rope on q [nq heads] and k [nk heads] at *pos, then k -> k_cache row *pos and
// v -> v_cache row *pos (rows of nk*head_dim floats).
cudaError_t launch_rope_kv(float* q, int64_t nq, float* k, int64_t nk, int64_t head_dim,
                           const int32_t* pos, const float* inv_freq, int style, float* k_cache,
                           float* v_cache, const float* v, cudaStream_t s);
// Spins the stream for about `us` microseconds (the profiler queues a step's launches behind it
// so they then run back to back, as in a graph).
cudaError_t launch_spin(int64_t us, cudaStream_t s);
// Reads every 16-byte word of buf [bytes] once (read-probe.cu): time it for the device's read
// bandwidth. sink: one device unsigned the kernel may write.
cudaError_t launch_read_probe(const void* buf, size_t bytes, unsigned* sink, cudaStream_t s);

// Y [T, rows] = X [T, cols] @ W^T (accumulate: Y += ..., prefill only). n_tokens <=
// kGemvMaxTokens runs the streaming GEMV (one pass
// over W; quantized dtypes quantize X into `workspace` first); larger batches dequantize W to
// fp16 in `workspace` and run a cuBLAS tensor-core GEMM.
constexpr int64_t kGemvMaxTokens = 4;
size_t matmul_workspace_bytes(const DeviceWeight& w, int64_t n_tokens);
// What a prefill matmul left in its workspace: x converted to fp16 (kHalf), to fp16 hi + lo
// (kHiLo16) or to fp16 hi + FP8 lo with its scale (kHiLo8). Passed back unchanged with the same
// workspace, the next matmul on the same x of the same kind skips the conversion; the caller
// clears it ({}) whenever x's contents may have changed or the workspace moved.
struct PrefillX {
  enum Kind { kNone, kHalf, kHiLo16, kHiLo8 };
  const float* x = nullptr;
  int64_t n = 0;
  Kind kind = kNone;
  bool operator==(const PrefillX& o) const { return x == o.x && n == o.n && kind == o.kind; }
};
// A prefill GEMM's x in kHiLo8 form written by the op that produces x (rmsnorm, swiglu), so the
// GEMM skips its split pass: hi [n] fp16 and lo [n] e5m2 (x-split.cuh), at the workspace offsets
// launch_matmul uses for an F16/BF16 weight with an FP8 copy; scale: lo's GEMM scale. bytes: the
// workspace these slots need.
struct XSplitOut {
  void* hi = nullptr;
  uint8_t* lo8 = nullptr;
  float* scale = nullptr;
  size_t bytes = 0;
};
// Whether kHiLo8 forms can come from producers: the FP8 pass has not failed on this device
// (whether it is on is the backend's option: only weights with an e4m3 copy take kHiLo8).
bool prefill_x_producible();
// The slots for an x of n values in `workspace` (null: bytes only).
XSplitOut prefill_x_slots(int64_t n, void* workspace);
cudaError_t launch_matmul(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y,
                          void* workspace, size_t workspace_bytes, cublasHandle_t blas,
                          cudaStream_t s, PrefillX* xcache = nullptr, bool accumulate = false);
// A quantized weight's resident fp16 copy (DeviceWeight::w16): its bytes (0: the dtype or shape
// takes none: F32/F16/BF16 weights, cols % 8 != 0) and the launch that writes it to `out`.
size_t weight_half_copy_bytes(const DeviceWeight& w);
cudaError_t launch_weight_half_copy(const DeviceWeight& w, void* out, cudaStream_t s);

// split: also write y's kHiLo8 forms (prefill rows only, rows > kGemvMaxTokens). xh (rows >
// kGemvMaxTokens, n % 4 == 0; not with split): also y's fp16 copy in launch_batch_x_half's
// layout, for the batched matmul's fp16 form. r_out [rows]: also each row's rsqrt(mean + eps).
cudaError_t launch_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                           float eps, cudaStream_t s, const XSplitOut* split = nullptr,
                           void* xh = nullptr, float* r_out = nullptr);

// pos: device int32 [T]; inv_freq: device f32 [head_dim/2]. style: 0 interleaved, 1 halves.
cudaError_t launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                        const int32_t* pos, const float* inv_freq, int style, cudaStream_t s);
// ops.h rope_partial: the first n_rot dims (even, <= head_dim) of each head rotated, cos and sin
// times mscale; pos device int32 [T], inv_freq device f32 [n_rot/2].
cudaError_t launch_rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                int64_t n_rot, const int32_t* pos, const float* inv_freq, int style,
                                float mscale, cudaStream_t s);
// The same result for many tokens (prefill, rope-prefill.cu): angles once per (token, pair),
// shared by the row's heads. head_dim even.
cudaError_t launch_rope_rows(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                             const int32_t* pos, const float* inv_freq, int style, cudaStream_t s);
// The angle table of a prefill pass: cs [T][head_dim / 2] (cos, sin) pairs of pos [T] (device)
// times inv_freq, as float2; rope_angles_bytes() bytes.
size_t rope_angles_bytes(int64_t n_tokens, int64_t head_dim);
cudaError_t launch_rope_angles(float* cs, int64_t n_tokens, int64_t head_dim, const int32_t* pos,
                               const float* inv_freq, cudaStream_t s);
// Prefill rope + KV append in one launch: q [T, nq heads] and k [T, nk heads] rotated in place
// by the table cs (launch_rope_angles), then k and v rows [T, nk*head_dim] stored to k_cache /
// v_cache rows cache_pos.. of types kv.k / kv.v (the same result as two launch_rope_rows and
// two launch_store_kv; f32 caches take the rows in the rope launch itself).
cudaError_t launch_rope_rows_kv(float* q, int64_t nq, float* k, int64_t nk, int64_t head_dim,
                                int64_t n_tokens, const float* cs, int style, void* k_cache,
                                void* v_cache, const float* v, int64_t cache_pos, cudaStream_t s,
                                const AttnKv& kv = {});

// Causal attention (ops.h). pos0_dev, when not null, overrides pos0 from device memory (CUDA
// graph replay). Small batches use split-K over the context: `partials` must hold
// attention_partials_floats(...) floats and max_ctx bounds pos0+T (sizes the split grid). Its
// first attention_counter_slots(T, n_heads) words are per-row counters that must be zero before
// a call (zero the buffer when allocated, and again when T * n_heads changes); every call
// leaves them zero. qbuf (split path only, head_dim % 32 == 0): also quantize out as in
// launch_rmsnorm_quant.
int64_t attention_partials_floats(int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                  int64_t max_ctx);
int64_t attention_counter_slots(int64_t n_tokens, int64_t n_heads);
// Decode (one token) with rope and the KV append fused in: q (left unrotated in memory) and this
// token's k are rotated at position pos0 inside the attention kernel, and k, v are written to
// row pos0 of k_cache / v_cache by it in the cache's type (the same result as launch_rope_kv, or
// rope and launch_store_kv, then attention). The decode kernel then reads rows 0..pos0-1 before
// waiting for the kernel launched before it (PDL): they must come from work finished before that
// kernel began, such as an earlier step behind a copy, a sync or a graph launch (always so for
// the backend's decode steps; two fused launches back to back on one cache are not).
struct AttnRope {
  const float* k = nullptr;         // [n_kv_heads, head_dim], not yet rotated
  const float* v = nullptr;         // [n_kv_heads, head_dim]
  const float* inv_freq = nullptr;  // device [head_dim / 2]
  int style = 0;                    // 0 interleaved, 1 halves
  // Per-head RMSNorm before the rotation (rmsnorm_heads of q's heads and k's, launch_rmsnorm's
  // arithmetic, so the same bits as the separate launches), or null.
  const float* q_norm = nullptr;  // device [head_dim]
  const float* k_norm = nullptr;
  float norm_eps = 0;
  // cos and sin times this (YaRN's attention factor, as launch_rope_partial with n_rot ==
  // head_dim); != 1 only where the decode kernels run (launch_attention refuses it elsewhere).
  float mscale = 1.f;
};
bool attention_rope_fusable(int64_t n_tokens, int64_t head_dim, int style);
// k_cache / v_cache: rows of kv's types (AttnKv), read in place; kv.sinks join each row's
// softmax denominator.
cudaError_t launch_attention(const float* q, const void* k_cache, const void* v_cache, float* out,
                             int64_t n_tokens, int64_t pos0, const int32_t* pos0_dev,
                             int64_t max_ctx, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                             float scale, float* partials, cudaStream_t s, void* qbuf = nullptr,
                             const AttnRope* rope = nullptr, const AttnKv& kv = {});
// launch_attention without the single-token decode kernel (attention-decode.cu): its split
// kernel for every decode, the baseline of hearth-cuda-bench --attention-only.
cudaError_t launch_attention_split(const float* q, const void* k_cache, const void* v_cache,
                                   float* out, int64_t n_tokens, int64_t pos0,
                                   const int32_t* pos0_dev, int64_t max_ctx, int64_t n_heads,
                                   int64_t n_kv_heads, int64_t head_dim, float scale,
                                   float* partials, cudaStream_t s, void* qbuf = nullptr,
                                   const AttnRope* rope = nullptr, const AttnKv& kv = {});

// Prefill attention on the tensor cores (attention-prefill.cu): causal, GQA, head_dim 64 or
// 128, n_tokens queries at positions pos0.. against k_cache / v_cache rows 0 .. pos0 + T - 1.
// q, k, p and v each go in as two fp16 halves (hi + lo), close to the fp32 kernel (f16 cache
// rows are exact in one half). launch_attention picks it for prefill when
// attention_prefill_tc_supported().
bool attention_prefill_tc_supported(int64_t head_dim);
cudaError_t launch_attention_prefill_tc(const float* q, const void* k_cache, const void* v_cache,
                                        float* out, int64_t n_tokens, int64_t pos0, int64_t n_heads,
                                        int64_t n_kv_heads, int64_t head_dim, float scale,
                                        cudaStream_t s, const AttnKv& kv = {});

// ops.h attention with an AttentionMask (attention-masked.cu): window, soft-cap, ring cache, sinks;
// decode and prefill, GQA, head_dim <= 256. pos0_dev, when not null, overrides pos0 from device
// memory (CUDA graph replay). A ring needs a window and ring_rows >= window + n_tokens - 1. Typed
// rows and sinks as launch_attention (AttnKv).
cudaError_t launch_attention_masked(const float* q, const void* k_cache, const void* v_cache,
                                    float* out, int64_t n_tokens, int64_t pos0,
                                    const int32_t* pos0_dev, int64_t n_heads, int64_t n_kv_heads,
                                    int64_t head_dim, float scale, int64_t window, float softcap,
                                    int64_t ring_rows, cudaStream_t s, const AttnKv& kv = {});

// split: also write out's kHiLo8 forms (XSplitOut); needs swiglu_split_able. xh (n % 4 == 0,
// not with split): out's fp16 copy as launch_rmsnorm's.
bool swiglu_split_able(const float* gate, const float* up, const float* out, int64_t n,
                       const XSplitOut& split);
cudaError_t launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s,
                          const XSplitOut* split = nullptr, void* xh = nullptr);
cudaError_t launch_add_inplace(float* y, const float* x, int64_t n, cudaStream_t s);
cudaError_t launch_add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t s);
// cache[(*pos) * row_floats ...] = src [n_tokens * row_floats]; pos is device int32.
cudaError_t launch_store_rows(float* cache, const float* src, const int32_t* pos,
                              int64_t row_floats, int64_t n_tokens, cudaStream_t s);
// Token t of f32 src [n_tokens, row_elems] converted to `type` (AttnKv's types, rounded as the
// CPU's store_kv_rows) into cache row (pos + t) % ring_rows (ring_rows 0: row pos + t); pos from
// pos_dev (device int32) when set, else the host value. n_tokens <= ring_rows.
cudaError_t launch_store_kv(void* cache, DType type, const float* src, const int32_t* pos_dev,
                            int64_t pos, int64_t row_elems, int64_t n_tokens, int64_t ring_rows,
                            cudaStream_t s);
// ops.h gelu_tanh_gated (out may alias gate or up), softcap (cap > 0) and scale, element-wise.
// xh (n % 4 == 0): out's fp16 copy as launch_rmsnorm's.
cudaError_t launch_gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n,
                                   cudaStream_t s, void* xh = nullptr);
cudaError_t launch_softcap(float* x, int64_t n, float cap, cudaStream_t s);
cudaError_t launch_scale(float* x, int64_t n, float factor, cudaStream_t s);
cudaError_t launch_fill(float* p, float value, int64_t n, cudaStream_t s);
// dst (device, 16-byte aligned) = the host bytes src [bytes <= sizeof(ParamTable::words)], written
// by a kernel that carries them as its parameter: unlike a host-to-device copy it keeps a chain
// of programmatic dependent launches going (the next kernel still starts early; see
// launch_param_table's kernel for why its order holds). Writes whole 16-byte words: dst's bytes
// from `bytes` to the next multiple of 16 become zero.
struct ParamTable {
  uint4 words[252];  // 4,032 bytes: with dst and the count, under the 4 KiB parameter limit
};
cudaError_t launch_param_table(const void* src, size_t bytes, void* dst, cudaStream_t s);
// dst = src with 16-byte loads/stores on the SMs (the bench's bandwidth ceiling; a graph memcpy
// node may run on a copy engine instead). n % 4 == 0, both 16-byte aligned.
cudaError_t launch_copy16(float* dst, const float* src, int64_t n, cudaStream_t s);

}  // namespace hearth::cuda
