// The CUDA backend's class, shared by its translation units (internal: include only from
// src/backend/cuda). cuda-backend.cpp holds its life cycle, buffers, uploads and decode-step
// capture; cuda-backend-ops.cpp the matmuls, norms and activations; cuda-backend-attention.cpp
// RoPE, the K/V append and attention (with the fused rope_append_attend); the families' ops are
// cuda-backend-family-ops.cpp's. Every op launches when called: fusions are the named ops of
// Backend (matmul_shared, matmul_add, rope_append_attend), and the only state carried from one
// op to the next is a hand-off (below), checked before use. Short members stay inline here.
#pragma once

#include <cublas_v2.h>

#include <cuda_runtime_api.h>
#include <thread>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda-options.h"
#include "backend/cuda/cuda-kv-memory.h"
#include "backend/cuda/cuda-picks.h"
#include "backend/cuda/cuda-profiler.h"
#include "backend/cuda/cuda-weight-upload.h"
#include "backend/cuda/cuda-weights.h"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/decode-batch.h"
#include "kernels/cuda/gemm-fp8.h"
#include "kernels/cuda/moe-ops.h"
#include "tensor/dtype.h"

namespace hearth::cuda_impl {

constexpr size_t kRingBytes = size_t(4) << 20;  // small per-op uploads (ids, positions)

struct StepValues {
  int32_t token = 0;
  int32_t pos = 0;
};

struct FreqEntry {
  std::vector<float> host;  // what was uploaded, to notice a caller reusing the pointer
  float* pinned = nullptr;
  float* dev = nullptr;
};

// A device buffer that ensure() grows on demand (freed with the backend).
struct DeviceScratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaOptions& options) : device_(device), opt_(options) {}

  Status init();

  ~CudaBackend() override {
    if (blas_preload_.joinable()) blas_preload_.join();
    if (kernel_preload_.joinable()) kernel_preload_.join();
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
    if (stale_exec_) cudaGraphExecDestroy(stale_exec_);
    for (float* p : vectors_) cudaFree(p);
    for (auto& [k, f] : freqs_) cudaFreeHost(f.pinned), cudaFree(f.dev);
    cudaFree(workspace_.ptr);
    cudaFree(moe_step_buf_.ptr);
    cudaFree(moe_pass_buf_.ptr);
    moe_tables_.clear();
    for (auto& t : angle_tables_) cudaFree(t.cs.ptr);
    cudaFree(partials_.ptr);
    cudaFree(xq_buf_.ptr);
    cudaFree(batch_ws_.ptr);
    cudaFree(batch_xh_.ptr);
    cudaFree(batch_xh_spare_.ptr);
    cudaFree(norm_ss_.ptr);
    cudaFree(norm_scale_.ptr);
    cudaFree(batch_partials_.ptr);
    cudaFree(ring_dev_);
    cudaFreeHost(ring_host_);
    cudaFree(step_dev_);
    cudaFreeHost(step_host_);
    if (step_copied_) cudaEventDestroy(step_copied_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  Status status() const override { return error_; }

  float* alloc(int64_t n) override {
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(size_t(n) * sizeof(float), 256);
    if (!check(cudaMalloc(&p, bytes), "cudaMalloc " + std::to_string(bytes) + " bytes"))
      throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void free(float* p) override {
    // The recorded step may point into p (the forward pass regrows its scratch for a long
    // prompt under the same ForwardScratch): replaying it would touch freed memory.
    drop_graph();
    check(cudaFree(p), "cudaFree");
  }

  // Paged KV caches through the driver's virtual memory API (cuda-kv-memory.h); where it is
  // missing, the Backend defaults (whole allocations).
  uint64_t commit_granularity() const override {
    return kv_memory_ && kv_memory_->available() ? kv_memory_->granularity() : 0;
  }
  void* reserve_kv(uint64_t bytes) override {
    if (!commit_granularity()) return Backend::reserve_kv(bytes);
    void* p = kv_memory_->reserve(bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  bool commit(void* base, uint64_t offset, uint64_t bytes) override {
    if (!commit_granularity()) return true;
    if (capturing()) {
      fail("KV memory committed inside a captured decode step");
      return false;
    }
    if (kv_memory_->commit(base, offset, bytes)) return true;
    // The weights' fp16 copies are a speed-up: the cache's rows come first.
    return drop_half_copies() && kv_memory_->commit(base, offset, bytes);
  }
  void decommit(void* base, uint64_t offset, uint64_t bytes) override {
    if (!commit_granularity()) return;
    // No synchronize: decommitted granules stay mapped (parked) until CudaKvMemory needs them,
    // and it synchronizes before it unmaps one that queued steps might still use.
    kv_memory_->decommit(base, offset, bytes);
  }
  void prepare_kv(void* base) override {
    if (commit_granularity()) kv_memory_->map_ahead(base);
  }
  void unreserve(void* base, uint64_t bytes) override {
    if (!commit_granularity()) return Backend::unreserve(base, bytes);
    drop_graph();  // as free(): a recorded step may point into the range
    synchronize();
    kv_memory_->unreserve(base);
  }

  void upload(float* dst, const float* src, int64_t n) override;
  void download(float* dst, const float* src, int64_t n) override;
  bool can_draw_rows(const PickRule& rule) const override { return !rule.penalizes(); }
  void pick_rows(const float* logits, int64_t rows, int64_t n_vocab, std::span<const RowDraw> draws,
                 int32_t* ids) override;
  void copy(float* dst, const float* src, int64_t n) override {
    if (src == folded_.xn) settle_folded_norm();
    check(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "copy");
  }
  void synchronize() override {
    if (!capturing()) check(cudaStreamSynchronize(stream_), "synchronize");
  }

  Status prepare_weight(Weight& w) override;
  void begin_loading_weights() override;
  Status finish_loading_weights() override;
  std::optional<uint64_t> device_memory_free() override {
    size_t free = 0, total = 0;
    if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess)
      return std::nullopt;
    return uint64_t(free);
  }
  uint64_t device_weight_bytes(const TensorView& h) const override {
    return cuda_weight_device_bytes(h, opt_.fp8_prefill);
  }
  std::optional<double> measure_read_bandwidth_gbs() override;
  Result<float*> prepare_vector(const TensorView& v) override;

  void embed(const Weight& table, const int32_t* ids, int64_t n_tokens, float* out) override;

  void begin_pass(Phase phase, int64_t n_tokens) override {
    decode_pass_ = phase != Phase::kPrefill;
    batch_pass_ = phase == Phase::kDecodeBatch;
    pass_tokens_ = n_tokens;
    folded_ = {};
    norm_scale_rows_ = -1;
  }

  void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) override;
  // Decode: one GEMV launch for up to three matrices of the same dtype and width (Q/K/V,
  // gate/up). Prefill: one GEMM each, converting the shared x once (prefill_x_).
  void matmul_shared(const float* x, int64_t n_tokens, std::span<const MatmulOut> outs) override;
  // A decode step's gate/up on the copy-engine form: both products and the activation in one
  // launch; elsewhere (and for the clamped SwiGLU) the default's ops.
  void matmul_gated(const float* x, int64_t n_tokens, const GatedFfn& f, float* out,
                    float* up_rows) override;
  // Decode: the residual add in the GEMV's store. Prefill: y += x . W^T in the GEMM itself
  // (beta = 1), no product buffer and no add kernel.
  void matmul_add(const Weight& w, const float* x, int64_t n_tokens, float* y,
                  float* scratch) override;

  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
               float eps) override;
  // A decode step's O or down projection with the next block's norm folded into it and into
  // the next matmuls (cuda::FoldedNorm, launch_matmul_batch_half_norm); elsewhere the
  // default's ops.
  void matmul_add_norm(const Weight& w, const float* x, int64_t n_tokens, float* y, float* scratch,
                       const float* norm_w, float eps, float* xn) override;
  // Decode passes: one launch a row (post-norm.cu), writing the next matmul's x form.
  void post_norm_add(float* y, const float* w_post, float* x, int64_t rows, int64_t n, float eps,
                     const float* w_next, float* xn) override;

  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const float* inv_freq, kernels::RopeStyle style) override;

  // The KV cache: rows of every kernels::is_kv_type type, read in place by the attention
  // kernels and written in the CPU's layout and rounding (kernels/cuda/kv-rows.cuh).
  bool supports_kv_type(DType t) const override { return kernels::is_kv_type(t); }
  using Backend::attention;
  using Backend::attention_masked;
  using Backend::store_kv;
  void attention(const float* q, const kernels::KvRows& k, const kernels::KvRows& v, float* out,
                 int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, float scale) override {
    launch_attention_op(q, k, v, out, n_tokens, pos0, n_heads, n_kv_heads, head_dim, scale, nullptr,
                        {});
  }
  // store_kv: cuda-backend-attention.cpp; attention_masked: cuda-backend-family-ops.cpp.
  void store_kv(void* cache, DType type, const float* src, int64_t pos, int64_t row_floats,
                int64_t n_tokens, int64_t ring_rows = 0) override;
  void attention_masked(const float* q, const kernels::KvRows& k, const kernels::KvRows& v,
                        float* out, int64_t n_tokens, int64_t pos0, int64_t n_heads,
                        int64_t n_kv_heads, int64_t head_dim, float scale,
                        const kernels::AttentionMask& mask) override;

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  // swiglu and gelu_tanh_gated: the output in the form the down projection reads (int8 for a
  // decode GEMV, fp16 for the batched matmul, split forms for a prefill GEMM where the
  // activation has that kernel), or plain.
  enum class Gate { kSilu, kGeluTanh };
  void gated(Gate g, const float* gate, const float* up, float* out, int64_t n);
  void add_inplace(float* y, const float* x, int64_t n) override;
  void add_bias(float* y, const float* b, int64_t rows, int64_t n) override;

  // One segment with full RoPE and no window, soft-cap or ring (sinks allowed): a decode step's
  // rotation and append run inside the attention kernel (or one rope + append launch, then
  // attention, for f32 rows); a prefill's as one launch before it. Anything else: the plain ops
  // (Backend's default).
  void rope_append_attend(const AttentionBlock& a) override;
  // A kDecodeBatch step with plain attention, full RoPE and f32 rows: every segment's rotation
  // and K/V append in one launch, attention of all segments in one (cuda-backend-batch.cpp).
  void rope_append_attend_batch(const AttentionBlock& a) override;

  // The families' ops (cuda-backend-family-ops.cpp).
  uint32_t features() const override;
  void rmsnorm_heads(float* x, const float* w, int64_t rows, int64_t head_dim, float eps) override;
  void rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const int32_t* pos, const float* inv_freq, kernels::RopeStyle style,
                    float mscale) override;
  void gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n) override;
  void softcap(float* x, int64_t n, float cap) override;
  void scale(float* x, int64_t n, float s) override;
  // Mixture of experts (cuda-backend-moe.cpp): routed on the device.
  void swiglu_clamped(const float* gate, const float* up, float* out, int64_t n, float alpha,
                      float limit) override;
  void moe_ffn(const MoeBlock& m) override;

  bool begin_decode_step(int32_t token, int64_t pos, int64_t ctx_capacity) override;
  void end_decode_step() override;
  void reset_decode_steps(bool buffers_kept) override { drop_graph(buffers_kept); }

  // Chained decoding (backend.h; the picks and their ring are cuda-picks.cpp's). Chained steps
  // are graph replays only, so it needs graphs; the profiler's eager steps would break the chain.
  int greedy_chain_depth() const override {
    return opt_.graphs && !profiler_ ? opt_.greedy_chain_depth : 0;
  }
  bool can_pick(const PickRule& rule, int64_t history_len) const override {
    return greedy_chain_depth() > 0 && CudaPicks::supports(rule, history_len);
  }
  Status begin_picks(const PickRule& rule, std::span<const int32_t> history) override {
    if (state_ != State::kIdle) return Status::error(name() + ": begin_picks inside a decode step");
    return picks_.set_rule(rule, history, stream_);
  }
  void pick(const float* logits, int64_t n_vocab, int64_t pos) override {
    if (state_ != State::kIdle) return fail("pick inside a decode step");
    if (Status st = picks_.pick(logits, n_vocab, pos, &step_dev_->token, &step_dev_->pos, stream_);
        !st.is_ok())
      fail(st.message());
  }
  // The device already holds (token, pos) from the last pick: replay without uploading them.
  // (So the recorded graph must never contain the step-values upload: begin_decode_step issues
  // it before the capture begins.)
  bool begin_chained_step(int64_t pos, int64_t ctx_capacity) override {
    if (state_ != State::kIdle || !opt_.graphs || profiler_ || !error_.is_ok() || !graph_exec_ ||
        graph_capacity_ != ctx_capacity || pos < 0 || pos >= ctx_capacity)
      return false;
    step_capacity_ = ctx_capacity;
    if (!check(cudaGraphLaunch(graph_exec_, stream_), "graph launch")) return false;
    state_ = State::kReplayed;
    return true;
  }
  Result<int32_t> picked_token(int64_t pos) override { return picks_.wait(pos); }

 private:
  enum class State { kIdle, kEager, kCapturing, kReplayed };

  bool capturing() const { return state_ == State::kCapturing; }
  // keep_warm: the buffers are sized already (being sized by the current warm-up step, or only
  // the KV cache changed), so the next step may be recorded without an eager one first.
  // The dropped recording is never replayed again, but it is kept as stale_exec_: the next
  // recording updates it in place (cudaGraphExecUpdate: the same kernels with new pointers),
  // several times cheaper than instantiating a new one (a server's new request on a new cache).
  void drop_graph(bool keep_warm = false) {
    if (capturing()) return;
    if (graph_exec_) {
      if (stale_exec_) cudaGraphExecDestroy(stale_exec_);
      stale_exec_ = graph_exec_;
    }
    graph_exec_ = nullptr;
    if (!keep_warm) warmed_capacity_ = -1;
  }
  bool stepping() const { return state_ == State::kEager || state_ == State::kCapturing; }

  int prof(const char* family) { return profiler_ ? profiler_->begin_op(family, stream_) : -1; }
  void unprof(int mark) {
    if (profiler_) profiler_->end_op(mark, stream_);
  }

  // An op with one launch and no hand-off: launch(), profiled as `family`, checked as `op`.
  template <class Launch>
  void unfused_op(const char* family, const char* op, Launch&& launch) {
    const int m = prof(family);
    check(launch(), op);
    unprof(m);
  }

  // The step's device position for an op of n_tokens at `pos` inside a decode step (null
  // outside one); a captured op at any other position is an error (fail(), null).
  const int32_t* step_pos_or_null(int64_t n_tokens, int64_t pos, const char* op);
  // store_kv of typed rows or into a ring cache (the row wrapped on the device): one launch.
  void store_kv_typed(void* cache, DType type, const float* src, int64_t pos, int64_t row_floats,
                      int64_t n_tokens, int64_t ring_rows);

  // Matmul kernels. A decode GEMV batch: jobs of one x (same dtype and cols, 1..3). With more
  // rows than the GEMV takes (a kDecodeBatch pass, or a prefill pass of at most
  // kMatmulBatchPrefillMaxTokens), the same jobs go to the batched matmul (matmul-batch.cu)
  // where it has the dtype, unless the weight's fp16 copy takes them (gemm_on_half_copy);
  // gemv_able says whether either kernel applies.
  bool gemv_able(const PreparedWeight& pw, int64_t n_tokens) const;
  bool gemm_on_half_copy(const PreparedWeight& pw, int64_t n_tokens) const;
  // Frees every weight's fp16 copy (CudaOptions::half_weights) when device memory runs out for
  // a KV cache's rows or a scratch buffer; none is made again. False when there were none.
  bool drop_half_copies();
  // Weights holding an fp16 copy (their backend_data; gone once the weight is).
  std::vector<std::weak_ptr<void>> half_copies_;
  bool half_copies_dropped_ = false;
  // Set while moe_grouped runs the experts' matmuls: experts get no fp16 copy (a sparse model's
  // experts are most of its bytes and each sees a few of a prompt's tokens: Qwen3-30B-A3B's
  // would take ~58 GB for what the batched matmul already does well at those counts).
  bool in_experts_ = false;
  // Whether weights may take (or keep taking) fp16 copies now: the option, not given up, not
  // an expert.
  bool half_copies_allowed() const {
    return opt_.half_weights && !half_copies_dropped_ && !in_experts_;
  }
  void launch_gemvs(const float* x, int64_t n_tokens, const cuda::GemvJob* jobs, int n_jobs);
  void launch_batch_half(const float* x, int64_t n_tokens, const cuda::GemvJob* jobs, int n_jobs);
  // Whether a job's output (or its residual) overlaps x (x_elems floats, the jobs' cols a row).
  bool writes_over(const cuda::GemvJob* jobs, int n_jobs, const float* x, int64_t x_elems) const;
  // The most rows a decode kernel that reads int8 x takes (the GEMV, or in a kDecodeBatch pass
  // the int8 batched matmul: from kMatmulBatchHalfMinTokens rows it takes fp16 x instead).
  int64_t decode_rows_max() const {
    return batch_pass_ ? cuda::kMatmulBatchHalfMinTokens - 1 : cuda::kGemvMaxTokens;
  }
  // The cuBLAS handle, made at first use (cuBLAS itself is opened then: cublas-loader.h); null
  // after a failure, which it reports.
  cublasHandle_t blas();
  // A prefill GEMM (cuBLAS over fp16 forms of x and W): y = x . W^T, or y += with accumulate.
  void launch_gemm(const Weight& w, const PreparedWeight& pw, const float* x, int64_t n_tokens,
                   float* y, bool accumulate);
  // The attention kernel (split-K decode or tensor-core prefill) over typed rows, optionally
  // rotating and appending this decode token's q/k/v inside it. mask: sinks anywhere; a window,
  // ring or soft-cap (and a rotation with an mscale) only where decode_kernel_masks() says.
  void launch_attention_op(const float* q, const kernels::KvRows& k, const kernels::KvRows& v,
                           float* out, int64_t n_tokens, int64_t pos0, int64_t n_heads,
                           int64_t n_kv_heads, int64_t head_dim, float scale,
                           const cuda::AttnRope* fused_rope, const kernels::AttentionMask& mask);
  // Whether one token's attention over these rows runs the decode kernels, which take a sliding
  // window, a ring and a soft-cap (AttnKv) where the other kernels do not.
  static bool decode_kernel_masks(int64_t n_tokens, int64_t head_dim, const kernels::KvRows& k,
                                  const kernels::KvRows& v, const kernels::AttentionMask& mask);
  // A prefill's rope q/k + K/V append as one launch over an angle table made once per pass.
  void launch_rope_rows_kv(const AttentionBlock& a, const KvSegment& s, const float* freq,
                           int style);

  // Hand-offs. An op may leave its output in the form the next op's kernel reads: the int8
  // activations of a decode GEMV's x (rmsnorm, swiglu, attention write them in their epilogue),
  // the fp16 copy of the batched matmul's x (rmsnorm, swiglu; and its own conversion, kept for
  // the next matrix of the same x) and the fp16 split forms of a prefill GEMM's x
  // (producer_split; and the GEMM's own conversion, likewise). A hand-off is good only while
  // nothing else reached the stream: every launch and copy passes through check(), which counts it
  // (stream_ops_), and a hand-off records the count it was made at. An op added later can
  // therefore cost a conversion, never feed a stale one.
  bool xq_ready(const float* x, int64_t rows, int64_t cols) const {
    return xq_at_ == stream_ops_ && xq_src_ == x && xq_.n_tokens * xq_.cols == rows * cols;
  }
  void hand_off_xq(const float* src, int64_t rows, int64_t cols) {
    xq_ = cuda::quantized_acts_view(xq_buf_.ptr, rows, cols);
    xq_src_ = src;
    xq_at_ = stream_ops_;
  }
  // The fp16 copy of the batched matmul's fp16 form (batch_xh_), written by the op before it
  // (rmsnorm, swiglu) when that op's rows take that form.
  bool half_output(int64_t rows, int64_t n) const {
    int64_t most = batch_pass_ ? cuda::kMatmulBatchMaxTokens
                               : (decode_pass_ ? 0 : cuda::kMatmulBatchPrefillMaxTokens);
    if (half_copies_allowed()) most = std::min(most, kHalfCopyMinTokens - 1);
    return opt_.fuse && int8_model_ && rows >= cuda::kMatmulBatchHalfMinTokens && rows <= most &&
           n % 128 == 0;
  }
  // A folded norm (matmul_add_norm): xn's rows exist only as batch_xh_ (handed off for xn) at
  // the per-row scale in norm_scale_'s half norm_scale_at_, with norm_ss_ the sums the matmuls
  // that read xn finish them from (they write this norm's scale to the other half). xn null:
  // none pending. Anything else that reads xn settles it first: the plain rmsnorm from y.
  struct FoldedRows {
    const float* xn = nullptr;
    const float* y = nullptr;
    const float* w = nullptr;
    float eps = 0;
    int64_t rows = 0, n = 0;
    int tiles = 0;
    bool scaled = false;  // a matmul wrote this norm's scale
  };
  void settle_folded_norm();
  // The next block's norm is done with (a new residual add): its scale becomes the latest.
  void retire_folded_norm();
  // The FoldedNorm a matmul of x (rows, cols) passes on, or null where x is not folded rows.
  const cuda::FoldedNorm* folded_input(const float* x, int64_t rows, int64_t cols,
                                       cuda::FoldedNorm& fn);
  float* norm_scale(int half) {
    return norm_scale_.as<float>() + half * cuda::kMatmulBatchMaxTokens;
  }
  // Converts x into batch_xh_ unless its producer handed that form over; false on a failure.
  bool batch_x_half(const float* x, int64_t rows, int64_t cols);
  bool xh_ready(const float* x, int64_t rows, int64_t cols) const {
    return xh_at_ == stream_ops_ && xh_src_ == x && xh_elems_ == rows * cols;
  }
  void hand_off_xh(const float* src, int64_t rows, int64_t cols) {
    xh_src_ = src;
    xh_elems_ = rows * cols;
    xh_at_ = stream_ops_;
  }
  // Whether this op's output feeds a decode GEMV: quantize it in the op's epilogue.
  bool quantize_output(int64_t rows, int64_t n) const {
    return opt_.fuse && int8_model_ && decode_pass_ && rows <= decode_rows_max() && n % 32 == 0;
  }
  // Slots for a prefill producer (rmsnorm, swiglu) of n floats to write its output's split
  // forms, so the GEMM reading it skips the split pass: only in a prefill pass of a model whose
  // GEMMs take those forms (F16/BF16: the last GEMM's kind). Null otherwise.
  // CudaOptions::producer_split = false turns it off (A/B).
  const cuda::XSplitOut* producer_split(int64_t n);
  void hand_off_prefill_x(const float* x, int64_t n) {
    prefill_x_ = {x, n, cuda::PrefillX::kHiLo8};
    prefill_x_at_ = stream_ops_;
  }

  void launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                   const int32_t* pos, const float* freq, int style);

  // moe_ffn's pieces (cuda-backend-moe.cpp).
  bool moe_on_device(const MoeBlock& m);
  const cuda::MoeExperts* moe_experts(const MoeBlock& m);
  void moe_grouped(const MoeBlock& m, const int32_t* ids, const float* weights);

  void fail(const std::string& what) {
    if (error_.is_ok()) error_ = Status::error("cuda backend: " + what);
  }
  bool check(cudaError_t e, const std::string& what) {
    ++stream_ops_;  // (hand-offs: anything that reached the stream ends them)
    if (e == cudaSuccess) return true;
    fail(what + ": " + cudaGetErrorString(e));
    return false;
  }

  const PreparedWeight* prepared(const Weight& w, const char* op) {
    auto* pw = static_cast<const PreparedWeight*>(w.backend_data.get());
    if (!pw || pw->magic != kCudaWeightMagic || pw->device != device_) {
      fail(std::string(op) + ": weight " + w.host.name + " was not prepared on this backend");
      return nullptr;
    }
    return pw;
  }

  // Grows a device scratch buffer outside capture (a captured step only reuses sizes that its
  // eager warm-up step already allocated).
  bool ensure(DeviceScratch& buf, size_t need, const char* what);

  // Copies small host data to device through the pinned ring; returns the device address.
  const void* stage_small(const void* src, size_t bytes);

  // inv_freq tables are few and constant per model: one device copy per host pointer, refreshed
  // if the contents change. The upload is an async copy from pinned memory, so it is legal (and
  // replays correctly) inside graph capture.
  const float* device_freqs(const float* host, int64_t n);

  int device_;
  const CudaOptions opt_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;  // made at the first prefill GEMM (blas())
  // Opens cuBLAS once the weights are up, off the load's path and before most first GEMMs.
  std::thread blas_preload_;
  std::thread kernel_preload_;  // CudaOptions::preload_kernels: runs preload_kernels()
  static void preload_kernels(int device);
  Status error_;
  WeightUploader uploader_;
  uint8_t* ring_host_ = nullptr;
  uint8_t* ring_dev_ = nullptr;
  size_t ring_offset_ = 0;
  DeviceScratch workspace_;
  DeviceScratch partials_;      // f32
  int64_t partials_rows_ = -1;  // T * n_heads the counters at the front of partials_ are for
  bool decode_pass_ = true;     // begin_pass's phase: kDecode or kDecodeBatch
  bool batch_pass_ = false;     // kDecodeBatch
  int64_t pass_tokens_ = 1;
  uint64_t stream_ops_ = 0;  // launches and copies so far (hand-offs)
  // The int8 activations hand-off: xq_buf_ holds x = xq_src_ quantized, made at xq_at_.
  DeviceScratch xq_buf_;
  // The batched decode matmul's partial sums (rows split over several blocks), and its fp16 x.
  DeviceScratch batch_ws_;
  DeviceScratch batch_xh_;
  // An op that reads one fp16 x and writes the next (matmul_gated) writes here, then the two
  // swap: its blocks still read x while the first ones store.
  DeviceScratch batch_xh_spare_;
  FoldedRows folded_;
  DeviceScratch norm_ss_;         // [rows, tiles]
  DeviceScratch norm_scale_;      // two halves of kMatmulBatchMaxTokens floats
  int norm_scale_at_ = 0;         // the half with the latest norm's rsqrt per row
  int64_t norm_scale_rows_ = -1;  // its rows this pass (-1: none; a fold needs it)
  // The batched decode attention's split partials (attention-batch.cu).
  DeviceScratch batch_partials_;
  int64_t batch_partials_rows_ = -1;  // segments x heads its counters were zeroed for
  // pick_rows' scratch: the ids, then per drawn row a one-token history and its length and a
  // position the pick writes (int32); the draws' penalised logits (f32, one row at a time).
  DeviceScratch row_picks_;
  cuda::QuantizedActs xq_;
  const float* xq_src_ = nullptr;
  uint64_t xq_at_ = ~uint64_t(0);
  // The fp16 hand-off: batch_xh_ holds xh_src_ (xh_elems_ floats) as fp16, made at xh_at_.
  const float* xh_src_ = nullptr;
  int64_t xh_elems_ = 0;
  uint64_t xh_at_ = ~uint64_t(0);
  // The prefill GEMM hand-off: x's fp16 (or hi + lo) forms in workspace_ (matmul.cu), made at
  // prefill_x_at_ (CudaOptions::prefill_x_cache off: every GEMM converts).
  cuda::PrefillX prefill_x_;
  uint64_t prefill_x_at_ = ~uint64_t(0);
  // The form the last GEMM's x took (kNone: none yet or no cache), and producers' split slots.
  cuda::PrefillX::Kind last_gemm_kind_ = cuda::PrefillX::kNone;
  cuda::XSplitOut split_slots_;
  // Rope angle tables of prefill rope_append_attend (cuda::launch_rope_angles): every layer of
  // a pass rotates by the same positions, so each of the pass's prompt chunks (a served step
  // carries several) computes its table once, in the first layer. Reused by content; the
  // oldest table makes room.
  struct AngleTable {
    std::vector<int32_t> pos;
    DeviceScratch cs;  // f32
    const float* freq = nullptr;
    int64_t head_dim = 0;
    uint64_t version = 0;
  };
  static constexpr int kAngleTables = 8;
  AngleTable angle_tables_[kAngleTables];
  int next_angle_table_ = 0;
  uint64_t freqs_version_ = 0;
  std::vector<float*> vectors_;
  bool int8_model_ = false;  // some weight uses the int8 GEMV: producers quantize their outputs
  std::unique_ptr<CudaProfiler> profiler_;
  std::unique_ptr<CudaKvMemory> kv_memory_;
  std::unordered_map<const float*, FreqEntry> freqs_;
  // MoE: each layer's expert tables (keyed by its first gate Weight), the decode scratch (ids,
  // weights, h) and the grouped path's.
  struct MoeTable {
    std::shared_ptr<void> mem;
    cuda::MoeExperts experts;
    std::vector<cuda::DeviceWeight> dws;  // what mem holds: gate, up, down [n_expert] each
    std::vector<const float*> biases;
  };
  std::unordered_map<const void*, MoeTable> moe_tables_;
  DeviceScratch moe_step_buf_;
  DeviceScratch moe_pass_buf_;

  StepValues* step_host_ = nullptr;
  StepValues* step_dev_ = nullptr;
  cudaEvent_t step_copied_ = nullptr;
  State state_ = State::kIdle;
  int64_t step_capacity_ = 0;
  int64_t warmed_capacity_ = -1;
  int64_t graph_capacity_ = -1;
  cudaGraphExec_t graph_exec_ = nullptr;
  cudaGraphExec_t stale_exec_ = nullptr;  // drop_graph's: updated by the next recording
  CudaPicks picks_;
};

}  // namespace hearth::cuda_impl
