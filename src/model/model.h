// A loaded model: hyper-parameters, weights (zero-copy views into the mapped source), the layer
// groups placed on backends, and the ONE generic forward pass (prefill and decode entry points).
// The model is immutable after load and may be shared by sessions on several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu-options.h"
#include "backend/cuda-options.h"
#include "backend/decode-loop.h"
#include "backend/placement.h"
#include "base/status.h"
#include "kv/kv-cache.h"
#include "model/arch.h"

namespace hearth {

class GgufFile;
class SafetensorsCheckpoint;

// Prefill is chunked so scratch stays bounded; a sliding layer's ring holds window + this.
constexpr int64_t kMaxTokensPerPass = 512;

// One layer's attention, as the file describes it.
struct LayerAttention {
  int64_t window = 0;  // > 0: a sliding layer that sees this many positions (its own included)
  int rope = 0;        // which RoPE table: 0 global, 1 the sliding layers' own (Gemma 3)
};

// RoPE inverse frequencies [n_rot/2] with their scaling folded in, and the factor the rotated
// dims are multiplied by (YaRN / LongRoPE attention factor). LongRoPE has a second table for
// contexts beyond the original one (llama.cpp's rule: chosen by the cache's context size).
struct RopeTable {
  std::vector<float> inv_freq;
  float mscale = 1.0f;
  std::vector<float> inv_freq_long;  // LongRoPE only
  float mscale_long = 1.0f;
  int64_t long_beyond = 0;  // contexts larger than this use the long table
};

// The flat description of a model that the ONE forward pass walks: sizes, and which blocks
// each layer uses (read from GGUF metadata or config.json; see arch.h for the family rows).
struct HParams {
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  double rope_theta = 10000.0;
  // none, linear, llama3 (from config), freqs (GGUF tensor), yarn, longrope
  std::string rope_scaling = "none";
  double rope_factor = 1.0;
  // The precision of the RoPE frequencies: "f32", or "bf16" / "f16" when the reference keeps
  // them in the checkpoint's dtype (transformers 5 holds its inv_freq buffer in the model's
  // dtype, so a bf16 checkpoint rotates by bf16-rounded frequencies).
  std::string rope_freq_type = "f32";
  bool tied_embeddings = false;
  // Blocks.
  int64_t n_rot = 0;        // rotated dims per head (partial rotary: < head_dim)
  float query_scale = 0;    // scores = q.k * query_scale (1/sqrt(head_dim) unless the file says)
  float attn_softcap = 0;   // > 0: attention scores soft-capped (Gemma 2)
  float final_softcap = 0;  // > 0: logits soft-capped (Gemma 2)
  float embed_scale = 0;    // > 0: embeddings multiplied by it (Gemma: sqrt(n_embd))
  FfnActivation activation = FfnActivation::kSilu;
  // kSwigluClamped's constants (gpt-oss: transformers' swiglu_limit, alpha fixed at 1.702).
  float swiglu_limit = 7.0f;
  float swiglu_alpha = 1.702f;
  NormPlacement norms = NormPlacement::kPre;
  bool qk_norm = false;
  // Mixture-of-experts FFN (n_expert > 0): a router picks n_expert_used of n_expert gated FFNs
  // of width n_ff_exp per token (softmax over all, top-k, renormalised when moe_norm_topk).
  // moe_layers[l] says which layers are sparse; the others are dense of width n_ff.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  bool moe_norm_topk = true;
  std::vector<bool> moe_layers;  // [n_layer] when n_expert > 0
  bool is_moe_layer(int64_t l) const { return n_expert > 0 && moe_layers[size_t(l)]; }
  std::vector<LayerAttention> layers;  // [n_layer]
  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  bool any_sliding() const {
    for (const auto& l : layers)
      if (l.window > 0) return true;
    return false;
  }
};

struct LayerWeights {
  Weight attn_norm_src, ffn_norm_src;            // views of the norm vectors (any float dtype)
  Weight post_attn_norm_src, post_ffn_norm_src;  // sandwich norms
  Weight q_norm_src, k_norm_src;                 // per-head q/k norms [head_dim]
  // Q/K/V and gate/up: their own tensors, or row views of a fused qkv / gate_up tensor (no copy).
  Weight wq, wk, wv, wo;
  Weight bq, bk, bv;  // present when the arch has qkv_bias
  Weight bo;          // present when the arch has attn_out_bias
  Weight sinks_src;   // attention sinks [n_head] (gpt-oss)
  Weight w_gate, w_up, w_down;
  // MoE layers: the router [n_expert, n_embd] and each expert's projections (HF's own tensors,
  // or 2-D views of GGUF's stacked ones, no copy).
  Weight router;
  std::vector<Weight> exp_gate, exp_up, exp_down;  // [n_expert]
  // Router bias [n_expert] and per-expert bias vectors (ArchSpec::moe_biases).
  Weight router_bias_src;
  std::vector<Weight> exp_gate_bias_src, exp_up_bias_src, exp_down_bias_src;  // [n_expert]
  // Backend copies of the small vectors in f32 (Gemma's (1 + w) already added); null where the
  // source above is absent.
  float *attn_norm = nullptr, *ffn_norm = nullptr;
  float *post_attn_norm = nullptr, *post_ffn_norm = nullptr;
  float *q_norm = nullptr, *k_norm = nullptr;
  float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *o_bias = nullptr;
  float *sinks = nullptr, *router_bias = nullptr;
  std::vector<float*> exp_gate_bias, exp_up_bias, exp_down_bias;  // [n_expert] when biased
};

// A contiguous range of layers on one backend ("chunk"): activations cross once per group.
struct LayerGroup {
  int64_t first = 0, last = 0;  // [first, last)
  Backend* backend = nullptr;
  DecodeLoop* decode_loop = nullptr;  // the backend's
};

struct LoadOptions {
  int n_threads = 0;   // 0: all available cores
  int gpu_layers = 0;  // layers placed on the GPU backend (kGpuLayersAll, kGpuLayersAuto)
  // Context the caller will give its sequences, for --gpu-layers auto's KV estimate
  // (0: the model's own, at most 4096).
  int64_t ctx_hint = 0;
  // The KV cache element types those sequences will use (the same estimate; a GPU layer whose
  // backend lacks a type counts f32 rows, as KvCache::create then keeps).
  KvCacheTypes kv_types;
  // CPU weights repacked for the kernels are cached on disk (backend/weight-cache.h) and
  // mmapped by later loads; false (--no-cache) packs in memory every load.
  bool use_weight_cache = true;
  // How the CPU backend works (AMX prefill, cache verification; backend/cpu-options.h).
  CpuOptions cpu;
  // How the GPU backend works (graphs, greedy chaining, profile; backend/cuda-options.h).
  CudaOptions cuda;
  // MoE layers whose router and experts stay on the CPU (backend/placement.h experts_on_cpu:
  // 0 none, N the first N layers, kCpuMoeAll every layer): --cpu-moe / --n-cpu-moe. A GPU layer
  // with CPU experts hands its FFN input across each step, so its decode is not captured.
  int cpu_moe = 0;
  // Called with a fraction in [0,1]; returning false cancels the load.
  std::function<bool(float)> progress;
};

// Where a load's time went, for the start-up report (hearth run --verbose, bench --json).
struct LoadPhases {
  double open_ms = 0;  // map the file, read its metadata, check every tensor
  // Making the GPU backend (CUDA context, cuBLAS, pinned staging) runs on a thread of its own
  // beside open_ms: gpu_init_ms is its whole time, gpu_wait_ms what the load still waited.
  double gpu_init_ms = 0;
  double gpu_wait_ms = 0;
  double weights_ms = 0;       // every weight prepared (read, uploaded, repacked) and the norms
  uint64_t weights_bytes = 0;  // the bytes of the weight tensors prepared
  double tokenizer_ms = 0;     // (filled by Engine::load)
};

// One segment of a batch: n_tokens consecutive tokens of one sequence starting at pos0.
struct BatchSegment {
  KvCache* kv = nullptr;
  int64_t pos0 = 0;
  int64_t n_tokens = 0;
  bool all_logits = false;  // logits for every token (else only the last)
};

// Per-caller scratch memory for the forward pass (one per session/thread).
class ForwardScratch {
 public:
  ForwardScratch() = default;
  ForwardScratch(const ForwardScratch&) = delete;
  ~ForwardScratch();
  struct Buffers {
    Backend* backend = nullptr;
    int64_t capacity_tokens = 0;
    float *x = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr;
    float *attn = nullptr, *gate = nullptr, *up = nullptr, *logits = nullptr;
    // MoE layers: router logits [T, n_expert], the rows routed to one expert and its output.
    float *router = nullptr, *moe_in = nullptr, *moe_out = nullptr;
  };
  std::vector<Buffers> per_backend;
  // --cpu-moe: the expert backend's MoE buffers (xn, router, gate, up, moe_in, moe_out) for
  // layers whose experts run off their group's backend.
  Buffers experts;
  // A decode step run as lanes (Backend::decode_lanes): each lane's own scratch.
  std::vector<std::unique_ptr<ForwardScratch>> lanes;
};

class Model {
 public:
  ~Model();
  const HParams& hparams() const { return hp_; }
  const ArchSpec& arch() const { return *arch_; }
  const std::string& source_path() const { return path_; }
  const std::string& source_format() const { return format_; }  // "gguf" or "safetensors"
  const GgufFile* gguf() const { return gguf_.get(); }          // null for HF directories
  kernels::RopeStyle rope_style() const { return rope_style_; }
  const std::vector<float>& inv_freq() const { return rope_[0].inv_freq; }
  // Backend features (Backend::Feature) a layer of this model needs beyond the Llama set.
  uint32_t needed_features() const;
  const std::vector<LayerGroup>& groups() const { return groups_; }
  std::vector<Backend*> layer_backends() const;
  // Bytes of weights streamed per decoded token (an MoE layer's router and n_expert_used of its
  // experts: the active bytes), and a histogram of weight types for `info`.
  uint64_t weight_bytes() const;
  // Layer l's weight matrices as `bytes` (a backend's device_weight_bytes) counts them: the
  // attention and dense FFN ones, plus the router and every expert when `experts` (what placing
  // the layer's experts on a device costs; --gpu-layers auto).
  uint64_t layer_weight_bytes(int64_t l, bool experts,
                              const std::function<uint64_t(const TensorView&)>& bytes) const;
  // Where layer l's router and experts run: its group's backend, or the CPU's (--cpu-moe).
  Backend* expert_backend(int64_t l) const { return expert_backends_[size_t(l)]; }
  std::vector<std::pair<std::string, int>> weight_type_counts() const;
  const LoadPhases& load_phases() const { return phases_; }

  // Runs the batch: tokens are the segments' tokens concatenated. Appends to each segment's KV
  // cache. Writes logits for each segment (all rows or the last row) into `logits`, in order.
  Status forward(const std::vector<int32_t>& tokens, const std::vector<BatchSegment>& segments,
                 ForwardScratch& scratch, std::vector<float>* logits) const;

  // forward() for a step whose rows mostly want only their pick (a served step): ids[r] is
  // output row r's greedy_argmax, or its draw for the rows in `draws` (Backend::pick_rows: on a
  // GPU only the ids cross the bus), and logits holds rows x n_vocab floats of which only the
  // rows with want_logits[r] set are written (want_logits: one entry per output row).
  Status forward_picks(const std::vector<int32_t>& tokens,
                       const std::vector<BatchSegment>& segments, ForwardScratch& scratch,
                       std::span<const uint8_t> want_logits,
                       std::span<const Backend::RowDraw> draws, std::vector<float>* logits,
                       std::vector<int32_t>* ids) const;
  // The backend that holds the logits (where forward_picks' draws run).
  Backend* head_backend() const { return groups_.back().backend; }

  // Like forward, but outputs the final RMS-normed hidden states [rows, n_embd] instead of
  // logits (for embeddings: the caller pools them).
  Status forward_hidden(const std::vector<int32_t>& tokens,
                        const std::vector<BatchSegment>& segments, ForwardScratch& scratch,
                        std::vector<float>* hidden) const;

  // Prefill: a prompt for one sequence at its cache's current end; logits of the last token (or
  // of all tokens with all_logits). Decode: one token. Both advance kv.used().
  Status prefill(KvCache& kv, const std::vector<int32_t>& tokens, ForwardScratch& scratch,
                 std::vector<float>* logits, bool all_logits = false) const;
  Status decode(KvCache& kv, int32_t token, ForwardScratch& scratch,
                std::vector<float>* logits) const;

  // Greedy generation: feeds `token` at kv.used(), takes greedy_argmax of the logits as the
  // next token, hands it to on_token and, while on_token returns true, feeds it in turn; stops
  // after max_steps tokens or when the cache is full (context_full). Produces the same tokens,
  // and leaves the same kv.used(), as a loop of decode() + greedy_argmax(). Where the backend
  // can chain (CUDA with every layer on it and graphs on; see Backend::greedy_chain_depth) the
  // argmax runs on the device and a few steps are queued ahead of the host: steps queued past
  // the stop only write cache rows at or beyond used(), and they have finished on return.
  // on_token must not run a decode step of this model: the chain holds the backend's decode
  // loop (backend/decode-loop.h), and such a step fails with an error instead of deadlocking.
  Result<GreedyRun> decode_greedy(KvCache& kv, int32_t token, int64_t max_steps,
                                  ForwardScratch& scratch,
                                  const std::function<bool(int32_t)>& on_token) const;

  // Whether decode_chained can pick by `rule` on the device after history_len tokens: every
  // layer on one backend that chains (and no debug taps), and that backend picks by the rule.
  bool can_chain(const Backend::PickRule& rule, int64_t history_len) const;
  // decode_greedy's chained form for any rule the backend picks by (can_chain first): sampled
  // decoding keeps the chain's overlap. history: the tokens so far, `token` last.
  Result<GreedyRun> decode_chained(KvCache& kv, int32_t token, int64_t max_steps,
                                   ForwardScratch& scratch, const Backend::PickRule& rule,
                                   std::span<const int32_t> history,
                                   const std::function<bool(int32_t)>& on_token) const;

  // A cache of n_ctx positions with K/V rows of `types`; Q8_0 needs head_dim % 32 == 0 (a
  // one-line error naming the type otherwise). With a pool (kv_pool()) its positions are
  // committed as they are used; without, allocated now.
  Result<KvCache> new_kv_cache(int64_t n_ctx, const KvCacheTypes& types = {},
                               std::shared_ptr<KvPool> pool = nullptr) const;
  // A pool of total_tokens positions (KvPool::kUnbounded: no limit) in blocks sized by
  // KvPool::block_tokens_for over this model's layer buffers of `types`.
  std::shared_ptr<KvPool> kv_pool(int64_t total_tokens, const KvCacheTypes& types = {}) const;

  // Debug taps: when set, called with ("blk.3.attn_out", data, n) after each named stage
  // (host copies; slow — for locating divergences, not for production).
  std::function<void(const std::string&, const float*, int64_t)> debug_tap;

 private:
  friend Result<std::shared_ptr<Model>> load_model(const std::string&, const LoadOptions&);
  friend class ModelBuilder;
  Model() = default;
  Status prepare_scratch(ForwardScratch& scratch, int64_t n_tokens) const;
  // What a pass hands back: logits or hidden rows (all of them), or with `picks`, the greedy
  // picks and the wanted logits rows (forward_picks).
  struct RowPicks {
    std::span<const uint8_t> want_logits;
    std::span<const Backend::RowDraw> draws;
    std::vector<int32_t>* ids;
  };
  Status run(const std::vector<int32_t>& tokens, const std::vector<BatchSegment>& segments,
             ForwardScratch& scratch, std::vector<float>* out, bool hidden,
             const RowPicks* picks = nullptr) const;
  // run() once the batch is checked: one pass over every row.
  Status run_pass(const std::vector<int32_t>& tokens, const std::vector<BatchSegment>& segments,
                  ForwardScratch& scratch, std::vector<float>* out, bool hidden,
                  const RowPicks* picks) const;
  // The picks of output rows [r0, r0 + n), held at `rows` on `be` (row r0 first): their ids into
  // picks.ids from r0, the draws among them by their rows, and the wanted rows' logits into
  // `logits` (all output rows' room, row 0 first).
  void pick_rows_of(Backend* be, const float* rows, int64_t r0, int64_t n, const RowPicks& picks,
                    float* logits) const;
  // run() for a decode step whose backend cuts it into `lanes` (Backend::decode_lanes).
  Status run_lanes(int lanes, const std::vector<int32_t>& tokens,
                   const std::vector<BatchSegment>& segments, ForwardScratch& scratch,
                   std::vector<float>* out, const RowPicks* picks) const;
  // One forward pass in flight: what run_group needs besides the weights.
  struct Pass {
    const std::vector<int32_t>& tokens;
    const std::vector<BatchSegment>& segs;
    std::vector<int32_t> pos;
    int64_t n_tokens;
    int64_t n_out;
    bool hidden;
  };
  // Embedding (first group), the group's layers, and the head (last group) on one backend.
  void run_group(size_t g, const Pass& pass, ForwardScratch& scratch) const;
  void tap(const std::string& name, Backend* b, const float* data, int64_t n) const;
  // What group g's recorded decode step depends on: its scratch buffers (they move when scratch
  // grows) and the sequence's cache.
  DecodeStepKey step_key(size_t g, const ForwardScratch& scratch, KvCache& kv) const;

  // One transformer layer (attention block, FFN block) of a pass on group g's backend.
  // experts: the --cpu-moe buffers (ForwardScratch::experts). attn_normed: b.xn holds this
  // layer's attention norm of x already. Returns whether b.xn now holds the next layer's (given
  // next_attn_norm, a sandwich layer's last step norms x for it: post_norm_add).
  bool run_layer(int64_t l, const Pass& p, ForwardScratch::Buffers& b,
                 ForwardScratch::Buffers& experts, Backend* be, bool attn_normed,
                 const float* next_attn_norm) const;
  void attention_block(int64_t l, const Pass& p, ForwardScratch::Buffers& b, Backend* be) const;
  // The FFN block: a dense gated MLP today; an MoE FFN slots in here (same input xn, same
  // residual contract: adds its output to x).
  void ffn_block(int64_t l, ForwardScratch::Buffers& b, Backend* be, int64_t T) const;
  // gate = act(gate) * up over n values, act the family's (SiLU or GELU-tanh).
  // The MoE FFN block (model/moe.cpp): x += sum over each token's top-k experts of
  // weight * down_e(act(gate_e xn) * up_e xn), through the post-norm when there is one. Layers
  // whose experts run on another backend (--cpu-moe) hand xn across through `experts`.
  void moe_block(int64_t l, ForwardScratch::Buffers& b, ForwardScratch::Buffers& experts,
                 Backend* be, int64_t T) const;
  // x += proj . in (the O or down projection), through the post-norm when the family has
  // sandwich norms (post_norm non-null); with next_norm, also the next block's norm of x into
  // b.xn (post_norm_add or matmul_add_norm, whose xn only the next matmuls read): returns
  // whether it did.
  bool add_block_output(const Weight& proj, const float* in, const float* post_norm,
                        const float* next_norm, ForwardScratch::Buffers& b, Backend* be,
                        int64_t T) const;

  HParams hp_;
  const ArchSpec* arch_ = nullptr;
  std::string path_, format_;
  LoadPhases phases_;
  std::shared_ptr<GgufFile> gguf_;
  std::shared_ptr<SafetensorsCheckpoint> st_;
  std::vector<std::vector<uint8_t>> owned_;  // buffers made at load (rare: converted vectors)
  Weight tok_embd_, output_norm_src_, output_;
  float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  kernels::RopeStyle rope_style_ = kernels::RopeStyle::kHalves;
  std::vector<RopeTable> rope_ = std::vector<RopeTable>(1);  // [0] global, [1] sliding layers'
  // Set when a layer needs rope_partial (partial rotary or an attention factor).
  bool rope_partial_ = false;
  bool plus_one_norms_ = false;  // norm weights w in the file mean (1 + w) (HF Gemma)
  std::vector<std::unique_ptr<Backend>> backends_;
  // Each backend's decode loop (capture, replay, chaining), in the order of backends_.
  std::vector<std::unique_ptr<DecodeLoop>> decode_loops_;
  std::vector<LayerGroup> groups_;
  std::vector<Backend*> expert_backends_;  // [n_layer]: expert_backend()
};

// Loads a GGUF file or a Hugging Face directory (config.json + safetensors).
Result<std::shared_ptr<Model>> load_model(const std::string& path, const LoadOptions& options);

// RoPE inverse frequencies [head_dim/2] for theta and HF-style scaling (none, linear, llama3).
std::vector<float> rope_inv_freq(int64_t head_dim, double theta, const std::string& scaling,
                                 double factor, double low_freq_factor, double high_freq_factor,
                                 int64_t original_context);

// YaRN (transformers' _compute_yarn_parameters; llama.cpp's ggml_rope_yarn): inverse frequencies
// of n_rot dims blended between interpolation (1/factor) and extrapolation by a ramp over the
// dims whose wavelengths fall between beta_fast and beta_slow rotations of the original context,
// and the attention factor (given, or 0.1 ln(factor) + 1, or the mscale / mscale_all_dim ratio).
struct YarnParams {
  double theta = 10000, factor = 1;
  int64_t original_context = 0;
  double beta_fast = 32, beta_slow = 1;
  double attention_factor = 0;  // 0: derived from factor / mscale
  double mscale = 0, mscale_all_dim = 0;
  bool truncate = true;
};
RopeTable yarn_rope_table(int64_t n_rot, const YarnParams& y);

// Rounds every frequency of t to "bf16" or "f16" (rope_freq_type); "f32" leaves them.
Status round_rope_freqs(RopeTable& t, const std::string& type);

// LongRoPE (Phi-3 128k, Phi-4-mini): inverse frequencies divided by per-frequency factors, short
// within the original context and long beyond it; the attention factor is given, or
// sqrt(1 + ln(factor) / ln(original_context)) with factor = context / original_context.
RopeTable longrope_table(int64_t n_rot, double theta, const std::vector<float>& short_factor,
                         const std::vector<float>& long_factor, double attention_factor,
                         int64_t context, int64_t original_context);

}  // namespace hearth
