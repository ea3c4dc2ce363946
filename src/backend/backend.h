// The backend seam: where activations live and who runs each op. The generic forward pass
// (model/forward.cpp) is written once against this interface; CPU and CUDA implement it.
// Calls are per op per layer (a few dozen per token), never per element, so virtual dispatch
// costs nothing measurable. All float* arguments point into the backend's own memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kernels/ops.h"
#include "tensor/tensor-view.h"

namespace hearth {

// A weight matrix or vector as a backend holds it. `host` always views the source bytes (mapped
// file or owned buffer); a backend may attach its own copy (device memory, repacked rows).
struct Weight {
  TensorView host;
  std::shared_ptr<void> backend_data;  // backend-private (device pointer, packed layout, ...)
  explicit operator bool() const { return host.data != nullptr; }
};

// The greedy rule every path shares (host loop, sampler at temperature 0, device pick): the
// largest logit, NaN counting as -inf, the lowest index among equals (0 when all are -inf/NaN).
inline int32_t greedy_argmax(const float* logits, int64_t n) {
  return kernels::argmax(logits, n);  // NaN never wins; 0 when nothing is above -inf
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Activation and KV memory in this backend's address space.
  virtual float* alloc(int64_t n_floats) = 0;
  virtual void free(float* p) = 0;
  virtual void upload(float* dst, const float* host_src, int64_t n) = 0;
  virtual void download(float* host_dst, const float* src, int64_t n) = 0;
  virtual void copy(float* dst, const float* src, int64_t n) = 0;  // within this backend
  virtual void synchronize() {}

  // Virtual memory for KV caches (kv/kv-cache.h, kv/kv-pool.h): a cache reserves address space
  // for its whole capacity once, so every kernel keeps addressing position p at base + p * row,
  // and physical memory is committed in granules only as the sequence grows. Offsets and sizes
  // of commit/decommit are multiples of commit_granularity(). The defaults, for a backend that
  // pages nothing (granularity 0), allocate the whole range at reserve time and commit nothing
  // more: every cache then still works, it only holds its full size.
  virtual uint64_t commit_granularity() const { return 0; }
  // Throws std::bad_alloc when the range cannot be had (as alloc).
  virtual void* reserve_kv(uint64_t bytes) { return alloc(int64_t((bytes + 3) / 4)); }
  // Makes [offset, offset + bytes) of a reserved range readable and writable; false when the
  // memory is not there (nothing of the range is committed then). Never called while a decode
  // step is being recorded (the forward pass commits before its first op).
  virtual bool commit(void* base, uint64_t offset, uint64_t bytes) { return true; }
  // Gives [offset, offset + bytes) back; its contents are lost. Waits for queued work first.
  virtual void decommit(void* base, uint64_t offset, uint64_t bytes) {}
  virtual void unreserve(void* base, uint64_t bytes) { free(static_cast<float*>(base)); }
  // A hint that the range's first granule is to be committed soon (a server slot given an idle
  // cache): a backend whose commits are slow may map it ahead, off the caller's thread. The
  // default does nothing.
  virtual void prepare_kv(void* base) {}
  // A backend may keep decommitted memory for the next commit (CPU: parked pages, up to a
  // limit; CUDA: mapped granules, cuda-kv-memory.h). This gives the CPU's back to the kernel;
  // a server calls it when it goes idle. The default keeps nothing.
  virtual void release_parked_kv() {}

  // Makes `w` usable by matmul/embed on this backend (upload, repack). Idempotent.
  virtual Status prepare_weight(Weight& w) = 0;
  // A load's many prepare_weight calls as one batch: in between, prepare_weight may return
  // before the weight's bytes have arrived (the CUDA backend then reads the next weights from
  // the file while earlier ones cross the bus). finish_loading_weights waits for them all and
  // returns the first error; it must run, also after a failed load, before any weight is used
  // or freed. The defaults (a synchronous prepare_weight) do nothing.
  virtual void begin_loading_weights() {}
  virtual Status finish_loading_weights() { return Status::ok(); }
  // For placing layers by free memory (--gpu-layers auto): the bytes of device memory free now
  // (nullopt: host memory, not budgeted here), and what prepare_weight plus later per-weight
  // copies will take for `w` on this backend.
  virtual std::optional<uint64_t> device_memory_free() { return std::nullopt; }
  virtual uint64_t device_weight_bytes(const TensorView& w) const { return w.nbytes; }
  // Streaming-read bandwidth of this backend's memory, measured now, in GB/s (the decode
  // roofline of layers placed here); nullopt for host memory, which the caller measures.
  virtual std::optional<double> measure_read_bandwidth_gbs() { return std::nullopt; }
  // A small f32 vector (norm weight, bias) in backend memory, converted from any float dtype.
  virtual Result<float*> prepare_vector(const TensorView& v) = 0;

  // Ops: the contract and shapes are kernels/ops.h's.
  virtual void embed(const Weight& table, const int32_t* host_ids, int64_t n_tokens,
                     float* out) = 0;
  virtual void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) = 0;
  // Several matmuls of one input (Q/K/V, gate/up), each into its own y. The CPU runs them as
  // one parallel pass (one join instead of three); the default is one matmul each.
  struct MatmulOut {
    const Weight* w;
    float* y;
  };
  virtual void matmul_shared(const float* x, int64_t n_tokens, std::span<const MatmulOut> outs) {
    for (const MatmulOut& o : outs) matmul(*o.w, x, n_tokens, o.y);
  }
  // y [T, rows] += x [T, cols] . W^T (the residual add after the O and down projections).
  // scratch [T, rows] may hold the product on the way (the default: matmul into it, then
  // add_inplace), so its contents are undefined afterwards.
  virtual void matmul_add(const Weight& w, const float* x, int64_t n_tokens, float* y,
                          float* scratch) {
    matmul(w, x, n_tokens, scratch);
    add_inplace(y, scratch, n_tokens * w.host.rows());
  }
  // The FFN's gated half: out [T, n_ff] = act(x . W_gate^T) * (x . W_up^T), act that of swiglu,
  // gelu_tanh_gated or swiglu_clamped (alpha, limit). One named op so a backend can run both
  // products and the activation as one pass; the default is matmul_shared into out and up_rows,
  // then the activation's op. up_rows [T, n_ff] is scratch: undefined afterwards.
  struct GatedFfn {
    const Weight* gate = nullptr;
    const Weight* up = nullptr;
    kernels::GatedAct act = kernels::GatedAct::kSilu;
    float alpha = 0, limit = 0;  // kSwigluClamped's
  };
  virtual void matmul_gated(const float* x, int64_t n_tokens, const GatedFfn& f, float* out,
                            float* up_rows) {
    const MatmulOut outs[] = {{f.gate, out}, {f.up, up_rows}};
    matmul_shared(x, n_tokens, outs);
    const int64_t n = n_tokens * f.gate->host.rows();
    switch (f.act) {
      case kernels::GatedAct::kSilu:
        return swiglu(out, up_rows, out, n);
      case kernels::GatedAct::kGeluTanh:
        return gelu_tanh_gated(out, up_rows, out, n);
      case kernels::GatedAct::kSwigluClamped:
        return swiglu_clamped(out, up_rows, out, n, f.alpha, f.limit);
    }
  }
  virtual void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                       float eps) = 0;
  // matmul_add, then xn = rmsnorm(y) * norm_w [T, rows] for the next block: one named op so a
  // backend can fold the norm into this product and the next. xn then holds the normed rows
  // only for the matmuls that read it next (matmul, matmul_shared, matmul_gated) while y is
  // unchanged: a backend may hand them the rows in another form and never write xn's floats.
  // The default: matmul_add, then rmsnorm. scratch as matmul_add's (it may be xn).
  virtual void matmul_add_norm(const Weight& w, const float* x, int64_t n_tokens, float* y,
                               float* scratch, const float* norm_w, float eps, float* xn) {
    matmul_add(w, x, n_tokens, y, scratch);
    rmsnorm(y, norm_w, xn, n_tokens, w.host.rows(), eps);
  }
  // The sandwich norms' step between two blocks (Gemma 2/3): x [rows, n] += rmsnorm(y) w_post,
  // then, with w_next, xn = rmsnorm(x) w_next (the next block's input). One named op so a
  // backend can run it as one pass; the default is the three ops. xn may be y; y's contents
  // afterwards are undefined unless it is xn.
  virtual void post_norm_add(float* y, const float* w_post, float* x, int64_t rows, int64_t n,
                             float eps, const float* w_next, float* xn) {
    rmsnorm(y, w_post, y, rows, n, eps);
    add_inplace(x, y, rows * n);
    if (w_next) rmsnorm(x, w_next, xn, rows, n, eps);
  }
  virtual void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    const int32_t* host_pos, const float* host_inv_freq,
                    kernels::RopeStyle style) = 0;
  // k_cache / v_cache: the layer's typed cache rows (kernels::KvRows; K and V types may differ).
  virtual void attention(const float* q, const kernels::KvRows& k_cache,
                         const kernels::KvRows& v_cache, float* out, int64_t n_tokens, int64_t pos0,
                         int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale) = 0;
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  virtual void add_inplace(float* y, const float* x, int64_t n) = 0;
  virtual void add_bias(float* y, const float* bias, int64_t rows, int64_t n) = 0;

  // Ops only some families need (kernels/ops.h has their contracts). A backend lists the ones
  // it runs in features(); the loader keeps the layers of a model that needs one its backend
  // lacks on the CPU (model/loader.cpp place()), so the defaults below, which stop the process
  // with the op's name, are never reached: a missing op can never be a silent wrong answer.
  enum Feature : uint32_t {
    kQkNorm = 1u << 0,           // rmsnorm_heads
    kGeluGated = 1u << 1,        // gelu_tanh_gated
    kMaskedAttention = 1u << 2,  // attention_masked: sliding window, soft-cap, ring cache
    kPartialRope = 1u << 3,      // rope_partial: partial rotary, attention factor
    kScaleOps = 1u << 4,         // scale (embedding scale), softcap (final logit soft-cap)
    // Mixture-of-experts FFN (moe_ffn): the default routes on the host; a backend listing it
    // runs the op its own way or accepts the default's host round trips.
    kMoe = 1u << 5,
    kAttentionSinks = 1u << 6,  // AttentionMask::sinks in attention_masked (gpt-oss)
    kClampedSwiglu = 1u << 7,   // swiglu_clamped (gpt-oss's experts)
  };
  virtual uint32_t features() const { return 0; }
  // x [rows, head_dim] in place: each row (one head of one token) RMS-normalised, times w.
  virtual void rmsnorm_heads(float* x, const float* w, int64_t rows, int64_t head_dim, float eps) {
    missing_feature("rmsnorm_heads");
  }
  virtual void attention_masked(const float* q, const kernels::KvRows& k_cache,
                                const kernels::KvRows& v_cache, float* out, int64_t n_tokens,
                                int64_t pos0, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                float scale, const kernels::AttentionMask& mask) {
    missing_feature("attention_masked");
  }
  virtual void rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            int64_t n_rot, const int32_t* host_pos, const float* host_inv_freq,
                            kernels::RopeStyle style, float mscale) {
    missing_feature("rope_partial");
  }
  virtual void gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n) {
    missing_feature("gelu_tanh_gated");
  }
  virtual void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n,
                              float alpha, float limit) {
    missing_feature("swiglu_clamped");
  }
  virtual void softcap(float* x, int64_t n, float cap) { missing_feature("softcap"); }
  virtual void scale(float* x, int64_t n, float s) { missing_feature("scale"); }

  // KV cache element types this backend stores and attends over (kernels::is_kv_type ones). A
  // cache asked for another type keeps f32 rows on this backend's layers (kv/kv-cache.h).
  virtual bool supports_kv_type(DType t) const { return t == DType::F32; }

  // KV append: rows [n_tokens, row_floats] of f32 src, converted to `type` (one this backend
  // supports_kv_type), into cache at position `pos`; ring_rows > 0: the cache is a ring (a
  // sliding layer's), position p in row p % ring_rows, n_tokens <= ring_rows (it wraps at most
  // once). A backend that replays captured decode steps reads pos from device memory and wraps
  // it there, so the forward pass must store K/V through this with the sequence's position
  // (not copy() with a host-computed address or row). The default stores f32 rows by copy().
  virtual void store_kv(void* cache_rows, DType type, const float* src, int64_t pos,
                        int64_t row_floats, int64_t n_tokens, int64_t ring_rows = 0) {
    if (type != DType::F32) missing_feature("store_kv of non-f32 rows");
    float* cache = static_cast<float*>(cache_rows);
    if (ring_rows == 0) return copy(cache + pos * row_floats, src, n_tokens * row_floats);
    const int64_t row0 = pos % ring_rows, first = std::min(n_tokens, ring_rows - row0);
    copy(cache + row0 * row_floats, src, first * row_floats);
    if (first < n_tokens) copy(cache, src + first * row_floats, (n_tokens - first) * row_floats);
  }

  // f32-row forms of the three cache ops (op tests, tools): the ops above with DType::F32 rows.
  void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                 int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, float scale) {
    attention(q, kernels::KvRows{k_cache, DType::F32}, kernels::KvRows{v_cache, DType::F32}, out,
              n_tokens, pos0, n_heads, n_kv_heads, head_dim, scale);
  }
  void attention_masked(const float* q, const float* k_cache, const float* v_cache, float* out,
                        int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                        int64_t head_dim, float scale, const kernels::AttentionMask& mask) {
    attention_masked(q, kernels::KvRows{k_cache, DType::F32}, kernels::KvRows{v_cache, DType::F32},
                     out, n_tokens, pos0, n_heads, n_kv_heads, head_dim, scale, mask);
  }
  void store_kv(float* cache, const float* src, int64_t pos, int64_t row_floats, int64_t n_tokens,
                int64_t ring_rows = 0) {
    store_kv(static_cast<void*>(cache), DType::F32, src, pos, row_floats, n_tokens, ring_rows);
  }

  // --- Named fused ops. The forward pass calls these by name; each default below is made of the
  // plain ops, so a backend that fuses nothing is still exact. A backend overrides one to run it
  // its own way (CUDA: fewer launches). A fusion is never inferred from the order of plain
  // calls, so a block a new family inserts between two ops cannot drop or corrupt one.

  // The pass the following ops belong to, said before its first op: a decode pass of one
  // sequence, a decode step of several sequences (kDecodeBatch: each segment adds one token, one
  // row each), or a prefill pass. Backends choose their per-pass forms and kernels from it (CUDA:
  // the decode GEMVs' int8 activations written by the op before; the batched decode matmul for
  // many sequences; the prefill GEMMs' split forms), never from a row count.
  enum class Phase { kDecode, kDecodeBatch, kPrefill };
  virtual void begin_pass(Phase phase, int64_t n_tokens) {}

  // Lanes: a decode step of `rows` sequences cut into decode_lanes(rows) groups, each group's
  // whole forward pass run by one of the backend's threads, its ops inline on that thread (CPU:
  // a step of kjv-13m's size makes ~40 hand-offs to the pool, each a join that waits for the
  // slower thread; lanes join once a step). 1 (the default): one pass over every row. A backend
  // may choose by timing: the forward pass reports each such step's seconds to
  // decode_step_took, whichever form it took.
  virtual int decode_lanes(int64_t rows) { return 1; }
  virtual void decode_step_took(int64_t rows, int lanes, double seconds) {}
  // Calls lane(i) for every i in [0, n), lanes on different threads at once, and waits; the ops
  // lane(i) issues run on its thread alone. The default runs them one after another.
  virtual void run_lanes(int n, const std::function<void(int)>& lane) {
    for (int i = 0; i < n; ++i) lane(i);
  }

  // RoPE on q and k (every row), then for each segment (consecutive rows of one sequence) the
  // K/V append into its cache and attention of its rows over that cache. q, k are rotated in
  // place unless a backend fuses the rotation into its attention kernel (then their contents
  // are undefined afterwards: read `out`, not q or k).
  struct RopeSpec {
    const float* inv_freq = nullptr;  // host [n_rot / 2]
    kernels::RopeStyle style = kernels::RopeStyle::kHalves;
    int64_t n_rot = 0;     // rotated dims per head; == head_dim unless partial
    float mscale = 1.f;    // attention factor folded into cos/sin (YaRN, LongRoPE)
    bool partial = false;  // through rope_partial (the model's choice: n_rot or an mscale)
  };
  struct KvSegment {  // the sequence's cache rows of this layer (kernels::KvRows' types)
    void* k_cache = nullptr;
    DType k_type = DType::F32;
    void* v_cache = nullptr;
    DType v_type = DType::F32;
    int64_t pos0 = 0, n_tokens = 0;
    int64_t ring_rows = 0;  // store_kv's and AttentionMask's
  };
  struct AttentionBlock {
    float* q = nullptr;                 // [T, n_heads * head_dim]
    float* k = nullptr;                 // [T, n_kv_heads * head_dim]
    const float* v = nullptr;           // [T, n_kv_heads * head_dim]
    float* out = nullptr;               // [T, n_heads * head_dim]
    const int32_t* host_pos = nullptr;  // [T]: each row's position
    int64_t n_tokens = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
    float scale = 1.f;
    RopeSpec rope;
    int64_t window = 0;  // AttentionMask's window and softcap (ring_rows per segment)
    float softcap = 0;
    const float* sinks = nullptr;  // AttentionMask's sinks [n_heads] (gpt-oss), backend memory
    std::span<const KvSegment> segments;  // their n_tokens sum to n_tokens
    // Per-head RMSNorm of q and k before the rotation (Qwen3, Gemma 3): rmsnorm_heads of every
    // head row with q_norm / k_norm [head_dim] (backend memory) and norm_eps, or none (null).
    // Part of the named op, so a backend may norm inside its attention kernel (CUDA decode).
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    float norm_eps = 0;
  };
  virtual void rope_append_attend(const AttentionBlock& a) {
    const int64_t qd = a.n_heads * a.head_dim;
    norm_and_rope(a);
    int64_t row = 0;
    for (const KvSegment& s : a.segments) {
      store_segment(a, s, row);
      const kernels::KvRows k_rows{s.k_cache, s.k_type}, v_rows{s.v_cache, s.v_type};
      const kernels::AttentionMask mask{a.window, a.softcap, s.ring_rows, a.sinks};
      if (mask.plain())
        attention(a.q + row * qd, k_rows, v_rows, a.out + row * qd, s.n_tokens, s.pos0, a.n_heads,
                  a.n_kv_heads, a.head_dim, a.scale);
      else
        attention_masked(a.q + row * qd, k_rows, v_rows, a.out + row * qd, s.n_tokens, s.pos0,
                         a.n_heads, a.n_kv_heads, a.head_dim, a.scale, mask);
      row += s.n_tokens;
    }
  }

  // rope_append_attend for segments of one token each, at their own positions in their own
  // caches: a decode step of several sequences (kDecodeBatch), or the decode rows of a prefill
  // pass that also carries prompt chunks. A backend may run all segments' rotation, K/V append
  // and attention in a few launches; the default is rope_append_attend.
  virtual void rope_append_attend_batch(const AttentionBlock& a) { rope_append_attend(a); }

  // The mixture-of-experts FFN block. For each token t, over its n_used experts e (ops.h
  // route_top_k of the router's logits x_t . R^T (+ router_bias)) with routing weights w_e:
  //   out[t] (+)= sum_e w_e * (down_e . act(gate_e . x_t + bg_e, up_e . x_t + bu_e) + bd_e).
  // The default routes on the host and runs one matmul per expert over the rows routed to it
  // (gathered); a backend that routes on the device (CUDA: a decode step stays one captured
  // graph) overrides it, and the CPU backend runs all experts as two grouped matmuls
  // (kernels/ops.h moe_experts). The forward pass calls it once per MoE layer.
  using GatedAct = kernels::GatedAct;
  struct MoeBlock {
    const float* x = nullptr;  // [T, n_embd]: the normed input
    float* out = nullptr;      // [T, n_embd]
    bool accumulate = false;   // out += the sum (the residual); else out = the sum
    int64_t n_tokens = 0, n_embd = 0, n_ff = 0, n_expert = 0, n_used = 0;
    bool renormalise = true;                 // route_top_k's
    const Weight* router = nullptr;          // [n_expert, n_embd]
    const float* router_bias = nullptr;      // [n_expert] or null
    std::span<const Weight> gate, up, down;  // [n_expert]: {n_ff, n_embd} twice, {n_embd, n_ff}
    std::span<float*const> gate_bias, up_bias, down_bias;  // [n_expert] each, or empty
    GatedAct act = GatedAct::kSilu;
    float swiglu_alpha = 0, swiglu_limit = 0;  // kSwigluClamped's
    // Scratch in this backend's memory: logits [T, n_expert]; gate_rows, up_rows [T, n_ff];
    // in_rows, out_rows [T, n_embd].
    float* logits = nullptr;
    float *gate_rows = nullptr, *up_rows = nullptr, *in_rows = nullptr, *out_rows = nullptr;
  };
  virtual void moe_ffn(const MoeBlock& m);  // the default: moe-ffn-default.cpp

  // Decode-step capture (CUDA graphs). For each single-token decode step the forward pass calls
  //   if (!b.begin_decode_step(token, pos, ctx_capacity)) { ...this backend's ops... }
  //   b.end_decode_step();   // then download/sync as usual
  // begin returns true when it already replayed the recorded step with the new token/pos (skip
  // the ops). Between begin and end the ops must be the same sequence with the same buffers
  // every step; embed's ids, rope's (and rope_partial's) pos, attention's (and
  // attention_masked's) pos0 and store_kv's pos (and its ring row) are taken from the step. Call
  // reset_decode_steps() when buffers or the layer split change; buffers_kept: only the KV cache
  // is another (same activations, same capacity), so no step needs to size anything again.
  // Defaults: eager.
  virtual bool begin_decode_step(int32_t token, int64_t pos, int64_t ctx_capacity) { return false; }
  virtual void end_decode_step() {}
  virtual void reset_decode_steps(bool buffers_kept = false) {}

  // Chained decoding. A backend that picks the next token itself lets decoding queue step n+1
  // before step n's token reaches the host, so the host's per-token work (sync, logits
  // download, sampling, launch) overlaps the device's step instead of sitting between steps.
  // DecodeLoop::chain drives it (step = begin/end_decode_step as above):
  //   first:               b.begin_picks(rule, history)   (the rule of every pick below)
  //   after each step:     b.pick(logits, n_vocab, pos)
  //     the token picked from logits row 0 by the rule becomes the device's token for the next
  //     step, at position pos + 1; nothing waits.
  //   the next step:       b.begin_chained_step(pos + 1, ctx_capacity) (instead of begin)
  //     replays the recorded step with the device's token; false when it cannot (nothing
  //     recorded for this capacity yet): the caller then needs the token on the host.
  //   later:               b.picked_token(pos) waits for that pick and returns its token.
  // At most greedy_chain_depth() picks may be outstanding (not yet returned by picked_token);
  // 0 means the backend cannot chain (the caller loops over decode + host pick).
  //
  // The rule: the argmax (greedy_argmax's), or a draw through sampling/sampler.h's chain
  // (penalties over the last repeat_last_n tokens, top-k, top-p, min-p, temperature) with its
  // randomness made from seed and the step's position, so the same seed picks the same tokens on
  // the same backend (the distribution is the sampler's on every backend; the tokens may differ).
  // Field meanings as SamplingParams' (this layer does not depend on it).
  struct PickRule {
    float temperature = 0.0f;  // <= 0: argmax (of the penalised logits)
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
    float repeat_penalty = 1.0f;
    int32_t repeat_last_n = 0;  // -1: the whole history
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint64_t seed = 0;
    bool penalizes() const {
      return repeat_last_n != 0 &&
             (repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
    }
    bool greedy() const { return temperature <= 0.0f && !penalizes(); }
  };
  virtual int greedy_chain_depth() const { return 0; }
  // Whether pick() can apply `rule` on this backend after a history of history_len tokens.
  virtual bool can_pick(const PickRule& rule, int64_t history_len) const {
    return rule.greedy() && greedy_chain_depth() > 0;
  }
  // history: the tokens so far (prompt and generated, the fed token last): the penalties' window.
  virtual Status begin_picks(const PickRule& rule, std::span<const int32_t> history) {
    return rule.greedy() ? Status::ok() : Status::error(name() + ": no device sampling");
  }
  virtual void pick(const float* logits, int64_t n_vocab, int64_t pos) {}
  virtual bool begin_chained_step(int64_t pos, int64_t ctx_capacity) { return false; }
  virtual Result<int32_t> picked_token(int64_t pos) {
    return Status::error(name() + ": chained decoding is not supported");
  }

  // A row of a served step drawn by `rule` instead of its argmax, as pick() draws after the
  // step at `pos` (the position of the row's token; with the seed, the draw's randomness): the
  // same seed draws the same tokens as a chained decode on this backend.
  struct RowDraw {
    int64_t row = 0;
    PickRule rule;
    int64_t pos = 0;
  };
  // Whether pick_rows can draw by `rule` (on a GPU: any rule without penalties, which would
  // need each row's history on the device).
  virtual bool can_draw_rows(const PickRule& rule) const { return false; }
  // The picks of the rows of logits [rows, n_vocab] (this backend's memory), one id per row into
  // ids (host): greedy_argmax of the row, or for the rows in `draws`, a draw by their rule. A GPU
  // backend picks on the device, so only the ids cross the bus (a served step's picks); this
  // default reads each row back and takes its argmax (it draws nothing: can_draw_rows).
  virtual void pick_rows(const float* logits, int64_t rows, int64_t n_vocab,
                         std::span<const RowDraw> draws, int32_t* ids) {
    std::vector<float> row(static_cast<size_t>(n_vocab));
    for (int64_t r = 0; r < rows; ++r) {
      download(row.data(), logits + r * n_vocab, n_vocab);
      ids[r] = greedy_argmax(row.data(), n_vocab);
    }
    if (!draws.empty()) missing_feature("row draws");
  }

  // First error an asynchronous backend hit since creation (ops return void); ok for the CPU.
  virtual Status status() const { return Status::ok(); }

 protected:
  // rope_append_attend's K/V append of segment s, whose rows start at row `row` of a.k and a.v.
  void store_segment(const AttentionBlock& a, const KvSegment& s, int64_t row) {
    const int64_t kvd = a.n_kv_heads * a.head_dim;
    store_kv(s.k_cache, s.k_type, a.k + row * kvd, s.pos0, kvd, s.n_tokens, s.ring_rows);
    store_kv(s.v_cache, s.v_type, a.v + row * kvd, s.pos0, kvd, s.n_tokens, s.ring_rows);
  }
  // rope_append_attend's per-head norms of q and k (AttentionBlock::q_norm, k_norm), in place.
  void norm_heads(const AttentionBlock& a) {
    if (a.q_norm) rmsnorm_heads(a.q, a.q_norm, a.n_tokens * a.n_heads, a.head_dim, a.norm_eps);
    if (a.k_norm) rmsnorm_heads(a.k, a.k_norm, a.n_tokens * a.n_kv_heads, a.head_dim, a.norm_eps);
  }
  // rope_append_attend's q and k before the append: normed per head, then rotated, in place.
  void norm_and_rope(const AttentionBlock& a) {
    norm_heads(a);
    rope_rows(a, a.q, a.n_heads);
    rope_rows(a, a.k, a.n_kv_heads);
  }
  // rope_append_attend's rotation of x (q or k: n_heads heads per row), plain or partial.
  void rope_rows(const AttentionBlock& a, float* x, int64_t n_heads) {
    if (!a.rope.partial)
      return rope(x, a.n_tokens, n_heads, a.head_dim, a.host_pos, a.rope.inv_freq, a.rope.style);
    rope_partial(x, a.n_tokens, n_heads, a.head_dim, a.rope.n_rot, a.host_pos, a.rope.inv_freq,
                 a.rope.style, a.rope.mscale);
  }

 private:
  // Inline: the CUDA library implements Backend without linking this layer.
  [[noreturn]] void missing_feature(const char* op) const {
    std::fprintf(stderr, "hearth: internal error: backend %s has no %s op (placement bug)\n",
                 name().c_str(), op);
    std::abort();
  }
};

// "qk-norm, gelu-gated" for the features in `mask` (load messages).
inline std::string backend_feature_names(uint32_t mask) {
  static const char* const kNames[] = {
      "per-head q/k norm",      "GELU-gated FFN",   "masked attention (sliding window / soft-cap)",
      "partial or scaled RoPE", "scale / soft-cap", "mixture-of-experts FFN",
      "attention sinks",        "clamped SwiGLU"};
  std::string out;
  for (uint32_t i = 0; i < std::size(kNames); ++i)
    if (mask & (1u << i)) out += (out.empty() ? "" : ", ") + std::string(kNames[i]);
  return out;
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace hearth
