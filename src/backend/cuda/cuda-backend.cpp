// The CUDA backend: one stream, cuBLAS for prefill GEMMs, pinned staging for uploads, and decode
// steps captured once into a CUDA graph then replayed with (token, pos) read from device memory.
// Decode launches are fused where the op sequence allows (see flush_gemv / flush_rope).
// New op: add its launcher to kernels/cuda/cuda-ops.h and forward to it here.
#include "backend/cuda/cuda-backend.h"
#include "backend/cuda/cuda-greedy.h"
#include "backend/cuda/cuda-profiler.h"
#include "backend/cuda/cuda-weights.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/gemm-fp8.h"
#include "tensor/dtype.h"

namespace hearth {

namespace {

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

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  Status init() {
    if (!check(cudaSetDevice(device_), "cudaSetDevice")) return error_;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) fail("cublasCreate failed");
    if (const Status st = uploader_.init(); !st.is_ok()) fail(st.message());
    check(cudaMallocHost(reinterpret_cast<void**>(&ring_host_), kRingBytes), "pinned ring");
    check(cudaMalloc(reinterpret_cast<void**>(&ring_dev_), kRingBytes), "device ring");
    check(cudaMallocHost(reinterpret_cast<void**>(&step_host_), sizeof(StepValues)), "step");
    check(cudaMalloc(reinterpret_cast<void**>(&step_dev_), sizeof(StepValues)), "step");
    if (check(cudaMalloc(reinterpret_cast<void**>(&norm_counter_), sizeof(unsigned)), "counter"))
      check(cudaMemset(norm_counter_, 0, sizeof(unsigned)), "counter");
    check(cudaEventCreateWithFlags(&step_copied_, cudaEventDisableTiming), "event");
    const char* env = std::getenv("HEARTH_CUDA_GRAPHS");
    graphs_enabled_ = !(env && std::strcmp(env, "0") == 0);
    const char* fuse = std::getenv("HEARTH_CUDA_FUSE");
    fuse_ = !(fuse && std::strcmp(fuse, "0") == 0);
    // Off by default: measured slower (the single-block tail costs more than the launch).
    const char* fuse_norm = std::getenv("HEARTH_CUDA_FUSE_NORM");
    fuse_norm_ = fuse_ && fuse_norm && std::strcmp(fuse_norm, "1") == 0;
    // A/B switches, each on unless set to 0.
    const auto on = [](const char* name) {
      const char* e = std::getenv(name);
      return !(e && std::strcmp(e, "0") == 0);
    };
    prefill_x_cache_ = on("HEARTH_CUDA_PREFILL_X_CACHE");
    matmul_add_ = on("HEARTH_CUDA_MATMUL_ADD");
    producer_split_ = fuse_ && on("HEARTH_CUDA_PRODUCER_SPLIT");
    rope_rows_kv_ = on("HEARTH_CUDA_ROPE_KV");
    const char* prof = std::getenv("HEARTH_CUDA_PROFILE");
    if (prof && std::strcmp(prof, "1") == 0)
      profiler_ = std::make_unique<CudaProfiler>(graphs_enabled_);
    chain_depth_ = cuda_greedy_chain_depth_from_env();
    return error_;
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
    for (float* p : vectors_) cudaFree(p);
    for (auto& [k, f] : freqs_) cudaFreeHost(f.pinned), cudaFree(f.dev);
    cudaFree(workspace_);
    cudaFree(angles_);
    cudaFree(partials_);
    cudaFree(xq_buf_);
    cudaFree(ring_dev_);
    cudaFreeHost(ring_host_);
    cudaFree(step_dev_);
    cudaFree(norm_counter_);
    cudaFreeHost(step_host_);
    if (step_copied_) cudaEventDestroy(step_copied_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  // Deferred launches go out first, so their launch errors are part of the answer.
  Status status() const override {
    const_cast<CudaBackend*>(this)->flush();
    return error_;
  }

  float* alloc(int64_t n) override {
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(size_t(n) * sizeof(float), 256);
    if (!check(cudaMalloc(&p, bytes), "cudaMalloc " + std::to_string(bytes) + " bytes"))
      throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void free(float* p) override {
    flush();
    acts_changed();
    // The recorded step may point into p (the forward pass regrows its scratch for a long
    // prompt under the same ForwardScratch): replaying it would touch freed memory.
    drop_graph();
    check(cudaFree(p), "cudaFree");
  }

  void upload(float* dst, const float* src, int64_t n) override {
    flush();
    acts_changed();
    if (capturing()) return fail("upload inside a captured decode step");
    const size_t bytes = size_t(n) * sizeof(float);
    if (bytes <= kRingBytes / 4) {
      const void* d = stage_small(src, bytes);
      if (d) check(cudaMemcpyAsync(dst, d, bytes, cudaMemcpyDeviceToDevice, stream_), "upload");
      return;
    }
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    check(cudaStreamSynchronize(stream_), "upload");
  }
  void download(float* dst, const float* src, int64_t n) override {
    flush();
    if (capturing()) return fail("download inside a captured decode step");
    check(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
          "download");
    check(cudaStreamSynchronize(stream_), "download");
    if (profiler_) profiler_->end_prefill(stream_);  // the logits download ends a prefill pass
  }
  void copy(float* dst, const float* src, int64_t n) override {
    flush();
    acts_changed();
    check(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "copy");
  }
  void synchronize() override {
    flush();
    if (!capturing()) check(cudaStreamSynchronize(stream_), "synchronize");
  }

  Status prepare_weight(Weight& w) override;
  std::optional<uint64_t> device_memory_free() override {
    size_t free = 0, total = 0;
    if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess)
      return std::nullopt;
    return uint64_t(free);
  }
  uint64_t device_weight_bytes(const TensorView& h) const override {
    return cuda_weight_device_bytes(h);
  }
  std::optional<double> measure_read_bandwidth_gbs() override;
  Result<float*> prepare_vector(const TensorView& v) override;

  void embed(const Weight& table, const int32_t* ids, int64_t n_tokens, float* out) override {
    flush();
    acts_changed();
    const PreparedWeight* pw = prepared(table, "embed");
    if (!pw || n_tokens <= 0) return;
    const int32_t* dev_ids = nullptr;
    if (capturing() || (stepping() && n_tokens == 1 && ids[0] == step_host_->token)) {
      if (n_tokens != 1) return fail("embed of several tokens inside a decode step");
      dev_ids = &step_dev_->token;
    } else {
      for (int64_t t = 0; t < n_tokens; ++t)
        if (ids[t] < 0 || ids[t] >= pw->dw.rows)
          return fail("embed: token id " + std::to_string(ids[t]) + " outside the table");
      dev_ids = static_cast<const int32_t*>(stage_small(ids, size_t(n_tokens) * 4));
      if (!dev_ids) return;
    }
    if (profiler_ && !stepping() && n_tokens > cuda::kGemvMaxTokens)
      profiler_->begin_prefill(stream_, long(n_tokens));
    const int m = prof("embed");
    check(cuda::launch_embed(pw->dw, dev_ids, n_tokens, out, stream_), "embed");
    unprof(m);
  }

  void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) override {
    matmul_into(w, x, n_tokens, y, false);
  }
  // Prefill: y += x . W^T in the GEMM itself (beta = 1), no product buffer and no add kernel.
  // Decode: the default (matmul, then add_inplace), which the queued GEMV takes into its store.
  void matmul_add(const Weight& w, const float* x, int64_t n_tokens, float* y,
                  float* scratch) override {
    const int64_t rows = w.host.rows(), cols = w.host.cols();
    if (n_tokens <= cuda::kGemvMaxTokens || !fuse_ || !matmul_add_ ||
        (y < x + n_tokens * cols && x < y + n_tokens * rows))
      return Backend::matmul_add(w, x, n_tokens, y, scratch);
    matmul_into(w, x, n_tokens, y, true);
  }

  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
               float eps) override {
    if (fuse_pending_norm(x, w, y, rows, n, eps)) return;
    flush();
    acts_changed();
    const int m = prof("rmsnorm");
    if (fuse_ && int8_model_ && rows <= cuda::kGemvMaxTokens && n % 32 == 0) {
      if (ensure(&xq_buf_, xq_bytes_, cuda::quantized_acts_bytes(rows, n),
                 "quantized activations") &&
          check(cuda::launch_rmsnorm_quant(x, w, y, rows, n, eps, xq_buf_, stream_), "rmsnorm"))
        set_xq(y, rows, n);
    } else {
      const cuda::XSplitOut* split =
          rows > cuda::kGemvMaxTokens ? producer_split(rows * n) : nullptr;
      if (check(cuda::launch_rmsnorm(x, w, y, rows, n, eps, stream_, split), "rmsnorm") && split)
        prefill_x_ = {y, rows * n, cuda::PrefillX::kHiLo8};
    }
    unprof(m);
  }

  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const float* inv_freq, kernels::RopeStyle style) override {
    flush_gemv();
    acts_changed();
    const float* freq = device_freqs(inv_freq, head_dim / 2);
    if (!freq) return;
    const int st = style == kernels::RopeStyle::kInterleaved ? 0 : 1;
    const bool at_step = stepping() && n_tokens == 1 && pos[0] == step_host_->pos;
    // Prefill rows outside a decode step queue the same way (one launch for the four ops).
    const bool rows =
        rope_rows_kv_ && !stepping() && !capturing() && n_tokens > cuda::kGemvMaxTokens;
    // Decode: rope q, rope k, store k, store v wait here and go out as one kernel.
    if (fuse_ && (at_step || rows) && rope_.stage == 1 && head_dim == rope_.hd &&
        freq == rope_.freq && st == rope_.style && x != rope_.q && n_tokens == rope_.nt &&
        (at_step || std::equal(pos, pos + n_tokens, rope_.host_pos))) {
      rope_.k = x, rope_.nk = n_heads, rope_.stage = 2;
      return;
    }
    flush_rope();
    if (fuse_ && (at_step || rows)) {
      rope_ = {};
      rope_.stage = 1, rope_.q = x, rope_.nq = n_heads, rope_.hd = head_dim, rope_.freq = freq;
      rope_.style = st, rope_.nt = n_tokens;
      if (rows) {
        rope_.host_pos = pos;
        rope_.dev_pos = static_cast<const int32_t*>(stage_small(pos, size_t(n_tokens) * 4));
        if (!rope_.dev_pos) rope_ = {};
        pending_pos_.assign(pos, pos + n_tokens);
      }
      return;
    }
    launch_rope(x, n_tokens, n_heads, head_dim, pos, freq, st);
  }

  void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                 int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, float scale) override {
    // This step's rope q/k + K/V append, when it is what feeds this attention, runs inside the
    // attention kernel (one launch fewer per layer).
    cuda::AttnRope fused_rope;
    bool fuse_rope = false;
    if (rope_.stage == 4 && n_tokens == 1 && q == rope_.q && k_cache == rope_.k_cache &&
        v_cache == rope_.v_cache && n_heads == rope_.nq && n_kv_heads == rope_.nk &&
        head_dim == rope_.hd && pos0 == step_host_->pos && stepping() &&
        cuda::attention_rope_fusable(n_tokens, head_dim, rope_.style)) {
      fused_rope = {rope_.k, rope_.v, rope_.freq, rope_.style};
      fuse_rope = true;
      rope_ = {};
    }
    flush();
    acts_changed();
    // Inside a decode step the split grid covers the whole cache, so one graph serves every pos.
    const bool stepping = state_ != State::kIdle;
    const int64_t max_ctx = stepping ? step_capacity_ : pos0 + n_tokens;
    const int32_t* pos0_dev = capturing() ? &step_dev_->pos : nullptr;
    const int64_t need =
        cuda::attention_partials_floats(n_tokens, n_heads, head_dim, max_ctx) * int64_t(4);
    const size_t cap_before = partials_bytes_;
    if (!ensure(reinterpret_cast<void**>(&partials_), partials_bytes_, size_t(need), "partials"))
      return;
    // The split kernel's per-row counters (at the front of partials) start at zero and are left
    // at zero by every launch; a new buffer or a new row count needs them zeroed once.
    const int64_t rows = n_tokens * n_heads;
    if (need > 0 && (partials_bytes_ != cap_before || rows != partials_rows_)) {
      const size_t slots = size_t(cuda::attention_counter_slots(n_tokens, n_heads)) * 4;
      if (!check(cudaMemsetAsync(partials_, 0, std::min(slots, partials_bytes_), stream_),
                 "partials"))
        return;
      partials_rows_ = rows;
    }
    // The output feeds the O projection: its combine pass also quantizes it.
    const int64_t width = n_heads * head_dim;
    const bool quant = fuse_ && int8_model_ && n_tokens <= cuda::kGemvMaxTokens &&
                       head_dim % 32 == 0 &&
                       ensure(&xq_buf_, xq_bytes_, cuda::quantized_acts_bytes(n_tokens, width),
                              "quantized activations");
    const int m = prof("attention");
    if (check(cuda::launch_attention(q, k_cache, v_cache, out, n_tokens, pos0, pos0_dev, max_ctx,
                                     n_heads, n_kv_heads, head_dim, scale, partials_, stream_,
                                     quant ? xq_buf_ : nullptr, fuse_rope ? &fused_rope : nullptr),
              "attention") &&
        quant)
      set_xq(out, n_tokens, width);
    unprof(m);
  }

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    flush();
    acts_changed();
    const int m = prof("swiglu");
    // In a decode step the output feeds the down projection: quantize it in the same pass (one
    // row of n; the GEMV reads the same bytes as [T, n/T]).
    if (fuse_ && int8_model_ && stepping() && n % 32 == 0) {
      if (ensure(&xq_buf_, xq_bytes_, cuda::quantized_acts_bytes(1, n), "quantized activations") &&
          check(cuda::launch_swiglu_quant(gate, up, out, 1, n, xq_buf_, stream_), "swiglu"))
        set_xq(out, 1, n);
    } else {
      const cuda::XSplitOut* split = producer_split(n);
      if (split && !cuda::swiglu_split_able(gate, up, out, n, *split)) split = nullptr;
      if (check(cuda::launch_swiglu(gate, up, out, n, stream_, split), "swiglu") && split)
        prefill_x_ = {out, n, cuda::PrefillX::kHiLo8};
    }
    unprof(m);
  }
  void add_inplace(float* y, const float* x, int64_t n) override {
    flush_rope();
    acts_changed();
    // The residual add right after a lone GEMV producing x goes into that GEMV's epilogue.
    if (pend_.n == 1 && pend_.jobs[0].y == x && !pend_.jobs[0].add_to &&
        n == pend_.n_tokens * pend_.jobs[0].w.rows && !(y < x + n && x < y + n) &&
        !(y < pend_.x + n_x() && pend_.x < y + n)) {
      pend_.jobs[0].add_to = y;
      // A one-token GEMV + add stays queued: the rmsnorm that usually follows goes into its
      // last block (fuse_pending_norm); any other op flushes it first.
      if (!(fuse_norm_ && norm_counter_ && pend_.n_tokens == 1)) flush_gemv();
      return;
    }
    flush_gemv();
    const int m = prof("add");
    check(cuda::launch_add_inplace(y, x, n, stream_), "add");
    unprof(m);
  }
  void add_bias(float* y, const float* b, int64_t rows, int64_t n) override {
    flush();
    acts_changed();
    check(cuda::launch_add_bias(y, b, rows, n, stream_), "add_bias");
  }

  void store_kv(float* cache, const float* src, int64_t pos, int64_t row_floats,
                int64_t n_tokens) override {
    flush_gemv();
    acts_changed();
    const bool at_step = stepping() && n_tokens == 1 && pos == step_host_->pos;
    const bool rows = rope_.dev_pos && n_tokens == rope_.nt;  // a queued prefill rope's rows
    if ((at_step || rows) && rope_.stage == 2 && src == rope_.k &&
        row_floats == rope_.nk * rope_.hd) {
      rope_.k_cache = cache, rope_.cache_pos = pos, rope_.stage = 3;
      return;
    }
    if ((at_step || rows) && rope_.stage == 3 && row_floats == rope_.nk * rope_.hd &&
        cache != rope_.k_cache && pos == rope_.cache_pos) {
      // Waits for the attention call, which can take rope and the append into its kernel.
      rope_.v_cache = cache, rope_.v = src, rope_.stage = 4;
      return;
    }
    flush_rope();
    if (capturing() || at_step) {
      const int m = prof("kv store");
      check(cuda::launch_store_rows(cache, src, &step_dev_->pos, row_floats, n_tokens, stream_),
            "store_kv");
      unprof(m);
      return;
    }
    const int m = prof("kv store");
    copy(cache + pos * row_floats, src, n_tokens * row_floats);
    unprof(m);
  }

  bool begin_decode_step(int32_t token, int64_t pos, int64_t ctx_capacity) override;
  void end_decode_step() override;
  void reset_decode_steps() override {
    flush();
    acts_changed();
    drop_graph();
  }

  // Greedy chaining (backend.h; the pick and ring are cuda-greedy.cpp's). Chained steps are
  // graph replays only, so it needs graphs; the profiler's eager steps would break the chain.
  int greedy_chain_depth() const override {
    return graphs_enabled_ && !profiler_ ? chain_depth_ : 0;
  }
  void pick_greedy(const float* logits, int64_t n_vocab, int64_t pos) override {
    flush();
    if (state_ != State::kIdle) return fail("pick_greedy inside a decode step");
    if (Status st = greedy_.pick(logits, n_vocab, pos, &step_dev_->token, &step_dev_->pos, stream_);
        !st.is_ok())
      fail(st.message());
  }
  // The device already holds (token, pos) from the last pick: replay without uploading them.
  // (So the recorded graph must never contain the step-values upload: begin_decode_step issues
  // it before the capture begins.)
  bool begin_chained_step(int64_t pos, int64_t ctx_capacity) override {
    flush();
    acts_changed();
    if (state_ != State::kIdle || !graphs_enabled_ || profiler_ || !error_.is_ok() ||
        !graph_exec_ || graph_capacity_ != ctx_capacity || pos < 0 || pos >= ctx_capacity)
      return false;
    step_capacity_ = ctx_capacity;
    if (!check(cudaGraphLaunch(graph_exec_, stream_), "graph launch")) return false;
    state_ = State::kReplayed;
    return true;
  }
  Result<int32_t> picked_token(int64_t pos) override { return greedy_.wait(pos); }

 private:
  enum class State { kIdle, kEager, kCapturing, kReplayed };

  bool capturing() const { return state_ == State::kCapturing; }
  // keep_warm: the buffers are being sized by the current warm-up step, which stays valid.
  void drop_graph(bool keep_warm = false) {
    if (capturing()) return;
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
    graph_exec_ = nullptr;
    if (!keep_warm) warmed_capacity_ = -1;
  }
  bool stepping() const { return state_ == State::kEager || state_ == State::kCapturing; }

  int prof(const char* family) { return profiler_ ? profiler_->begin_op(family, stream_) : -1; }
  void unprof(int mark) {
    if (profiler_) profiler_->end_op(mark, stream_);
  }

  void matmul_into(const Weight& w, const float* x, int64_t n_tokens, float* y, bool accumulate) {
    flush_rope();
    const PreparedWeight* pw = prepared(w, "matmul");
    if (!pw) return;
    const cuda::DeviceWeight& dw = pw->dw;
    // y overwriting the quantized x's source makes the cached quantization stale.
    const bool clobbers =
        xq_valid_ && y < xq_src_ + xq_.n_tokens * xq_.cols && xq_src_ < y + n_tokens * dw.rows;
    if (prefill_x_.x && y < prefill_x_.x + prefill_x_.n && prefill_x_.x < y + n_tokens * dw.rows)
      prefill_x_ = {};  // this product overwrites the x whose conversion is cached
    const bool int8 = cuda::uses_int8_gemv(dw.dtype);
    const bool plain = dw.dtype == DType::F32 || dw.dtype == DType::F16 || dw.dtype == DType::BF16;
    if (!accumulate && n_tokens <= cuda::kGemvMaxTokens && (int8 || (plain && dw.cols % 8 == 0))) {
      // Decode GEMVs wait in pend_ so matrices reading the same x share a launch.
      if (pend_.n > 0 && !(fuse_ && pend_.n < 3 && !pend_.jobs[0].add_to && pend_.x == x &&
                           pend_.n_tokens == n_tokens && pend_.int8 == int8 &&
                           pend_.jobs[0].w.dtype == dw.dtype && pend_.jobs[0].w.cols == dw.cols))
        flush_gemv();
      if (int8) {
        // Q, K and V (and gate, up) read the same x: quantize it once for all of them (or take
        // what the producing op's fused epilogue wrote: same bytes for any T*cols split).
        if (!(xq_valid_ && xq_src_ == x && xq_.n_tokens * xq_.cols == n_tokens * dw.cols)) {
          flush_gemv();  // queued jobs read the buffer about to be rewritten
          acts_changed();
          if (!ensure(&xq_buf_, xq_bytes_, cuda::quantized_acts_bytes(n_tokens, dw.cols),
                      "quantized activations"))
            return;
          const int m = prof("quantize x");
          const bool ok =
              check(cuda::launch_quantize_acts(x, n_tokens, dw.cols, xq_buf_, &xq_, stream_),
                    "quantize activations");
          unprof(m);
          if (!ok) return;
          xq_src_ = x;
          xq_valid_ = true;
        }
        pend_.xa = cuda::quantized_acts_view(xq_buf_, n_tokens, dw.cols);
      }
      last_gemm_kind_ = cuda::PrefillX::kNone;
      pend_.jobs[pend_.n++] = {dw, y, nullptr};
      pend_.x = x;
      pend_.n_tokens = n_tokens;
      pend_.int8 = int8;
      // In place (y over x): later jobs could not read x any more.
      if (!fuse_ || (y < x + n_tokens * dw.cols && x < y + n_tokens * dw.rows)) flush_gemv();
      if (clobbers) acts_changed();
      return;
    }
    flush_gemv();
    if (clobbers) acts_changed();
    last_gemm_kind_ = cuda::PrefillX::kNone;
    if (!pw->fp8_tried) {
      const Status st = make_e4m3_copy(const_cast<PreparedWeight&>(*pw), w.host.name, stream_);
      if (!st.is_ok()) return fail(st.message());
    }
    const size_t need = cuda::matmul_workspace_bytes(pw->dw, n_tokens);
    if (need > workspace_bytes_) prefill_x_ = {};  // the converted x goes with the old buffer
    if (!ensure(reinterpret_cast<void**>(&workspace_), workspace_bytes_, need, "workspace")) return;
    const int m = prof("gemm");
    check(cuda::launch_matmul(pw->dw, x, n_tokens, y, workspace_, workspace_bytes_, blas_, stream_,
                              prefill_x_cache_ ? &prefill_x_ : nullptr, accumulate),
          "matmul " + w.host.name);
    unprof(m);
    last_gemm_kind_ = prefill_x_.kind;
    if (y < x + n_tokens * dw.cols && x < y + n_tokens * dw.rows) prefill_x_ = {};  // in place
  }

  // Slots for a producer (prefill rmsnorm, swiglu) to write its output's split forms, so the
  // GEMM reading it skips the split pass: only while the last matmul was a prefill GEMM that
  // took those forms (an F16/BF16 model's prefill; it implies a prefill-sized output). Null
  // otherwise. HEARTH_CUDA_PRODUCER_SPLIT=0 turns it off (A/B).
  const cuda::XSplitOut* producer_split(int64_t n) {
    if (!producer_split_ || last_gemm_kind_ != cuda::PrefillX::kHiLo8 || stepping() ||
        capturing() || !cuda::prefill_x_producible())
      return nullptr;
    if (!ensure(reinterpret_cast<void**>(&workspace_), workspace_bytes_,
                cuda::prefill_x_slots(n, nullptr).bytes, "workspace"))
      return nullptr;
    split_slots_ = cuda::prefill_x_slots(n, workspace_);
    return &split_slots_;
  }

  // Activations may have changed: the quantized x of the decode GEMVs and the converted x of
  // the prefill GEMMs no longer describe them.
  void acts_changed() {
    xq_valid_ = false;
    prefill_x_ = {};
  }
  void set_xq(const float* src, int64_t rows, int64_t cols) {
    xq_ = cuda::quantized_acts_view(xq_buf_, rows, cols);
    xq_src_ = src;
    xq_valid_ = true;
  }
  int64_t n_x() const { return pend_.n_tokens * pend_.jobs[0].w.cols; }

  void flush() {
    flush_gemv();
    flush_rope();
  }
  void flush_gemv(const cuda::GemvNorm* norm = nullptr) {
    if (pend_.n == 0) return;
    const int n = pend_.n;
    pend_.n = 0;
    const int m = prof(n > 1                  ? "gemv (batched)"
                       : norm                 ? "gemv + add + rmsnorm"
                       : pend_.jobs[0].add_to ? "gemv + add"
                                              : "gemv");
    check(pend_.int8 ? cuda::launch_gemv_int8_multi(pend_.jobs, n, pend_.xa, stream_, norm)
                     : cuda::launch_gemv_float_multi(pend_.jobs, n, pend_.x, pend_.n_tokens,
                                                     stream_, norm),
          "gemv");
    unprof(m);
  }
  // rmsnorm of the residual row a queued one-token GEMV + add is writing: runs in that GEMV's
  // last block (with the int8 activations for the next GEMVs on int8 models).
  bool fuse_pending_norm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                         float eps) {
    if (!fuse_norm_ || !norm_counter_ || rows != 1 || pend_.n != 1 || pend_.n_tokens != 1 ||
        rope_.stage != 0 || pend_.jobs[0].add_to != x || pend_.jobs[0].w.rows != n ||
        (y < x + n && x < y + n) || (y < pend_.x + n_x() && pend_.x < y + n))
      return false;
    // The quantized output goes to xq_buf_ (the queued GEMV's own x, read before the last block
    // starts); never reallocate it under that GEMV.
    const bool quant =
        int8_model_ && n % 32 == 0 && xq_buf_ && xq_bytes_ >= cuda::quantized_acts_bytes(1, n);
    // The int8 GEMV's epilogue always quantizes, the float one never does.
    if (int8_model_ != pend_.int8 || (int8_model_ && !quant)) return false;
    cuda::GemvNorm nm;
    nm.w = w, nm.y = y, nm.eps = eps, nm.counter = norm_counter_;
    nm.qbuf = quant ? xq_buf_ : nullptr;
    flush_gemv(&nm);
    acts_changed();
    if (quant) set_xq(y, 1, n);
    return true;
  }
  struct PendingRope;  // below, with the other queued work
  // A decode step's rope/store sequence that did not complete the fused pattern: run its parts.
  void flush_rope() {
    if (rope_.stage == 0) return;
    const PendingRope r = rope_;
    rope_ = {};
    if (r.dev_pos) return flush_rope_rows(r);
    if (r.stage == 4) {
      const int m = prof("rope+kv store");
      check(cuda::launch_rope_kv(r.q, r.nq, r.k, r.nk, r.hd, &step_dev_->pos, r.freq, r.style,
                                 r.k_cache, r.v_cache, r.v, stream_),
            "rope+kv");
      unprof(m);
      return;
    }
    const int32_t pos = step_host_->pos;
    if (r.stage >= 1) launch_rope(r.q, 1, r.nq, r.hd, &pos, r.freq, r.style);
    if (r.stage >= 2) launch_rope(r.k, 1, r.nk, r.hd, &pos, r.freq, r.style);
    if (r.stage >= 3)
      check(cuda::launch_store_rows(r.k_cache, r.k, &step_dev_->pos, r.nk * r.hd, 1, stream_),
            "store_kv");
  }
  // A queued prefill rope/store sequence: one launch when complete, else its parts.
  void flush_rope_rows(const PendingRope& r) {
    const int64_t row = r.nk * r.hd;
    if (r.stage == 4) {
      const int m = prof("rope+kv store");
      // Every layer of a pass rotates by the same positions: one angle table per pass.
      if (pending_pos_ != angles_pos_ || r.freq != angles_freq_ || r.hd != angles_hd_ ||
          freqs_version_ != angles_version_) {
        angles_pos_.clear();
        if (!ensure(reinterpret_cast<void**>(&angles_), angles_bytes_,
                    cuda::rope_angles_bytes(r.nt, r.hd), "rope angles") ||
            !check(cuda::launch_rope_angles(angles_, r.nt, r.hd, r.dev_pos, r.freq, stream_),
                   "rope angles"))
          return unprof(m);
        angles_pos_ = pending_pos_, angles_freq_ = r.freq, angles_hd_ = r.hd;
        angles_version_ = freqs_version_;
      }
      check(cuda::launch_rope_rows_kv(r.q, r.nq, r.k, r.nk, r.hd, r.nt, angles_, r.style, r.k_cache,
                                      r.v_cache, r.v, r.cache_pos, stream_),
            "rope+kv");
      return unprof(m);
    }
    int m = prof("rope");
    check(cuda::launch_rope_rows(r.q, r.nt, r.nq, r.hd, r.dev_pos, r.freq, r.style, stream_),
          "rope");
    if (r.stage >= 2)
      check(cuda::launch_rope_rows(r.k, r.nt, r.nk, r.hd, r.dev_pos, r.freq, r.style, stream_),
            "rope");
    unprof(m);
    if (r.stage < 3) return;
    m = prof("kv store");
    check(cudaMemcpyAsync(r.k_cache + r.cache_pos * row, r.k, size_t(r.nt * row) * sizeof(float),
                          cudaMemcpyDeviceToDevice, stream_),
          "store_kv");
    unprof(m);
  }
  void launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                   const int32_t* pos, const float* freq, int style) {
    const int32_t* dev_pos = nullptr;
    if (stepping() && n_tokens == 1 && pos[0] == step_host_->pos) {
      dev_pos = &step_dev_->pos;
    } else if (capturing()) {
      return fail("rope inside a decode step must be one token at the step's position");
    } else {
      dev_pos = static_cast<const int32_t*>(stage_small(pos, size_t(n_tokens) * 4));
      if (!dev_pos) return;
    }
    const int m = prof("rope");
    // Prefill rows: angles once per (token, pair) for all heads (the per-element kernel spent
    // ~19 us a launch on double sincos at 512 tokens x 32 heads).
    if (n_tokens > cuda::kGemvMaxTokens)
      check(cuda::launch_rope_rows(x, n_tokens, n_heads, head_dim, dev_pos, freq, style, stream_),
            "rope");
    else
      check(cuda::launch_rope(x, n_tokens, n_heads, head_dim, dev_pos, freq, style, stream_),
            "rope");
    unprof(m);
  }

  void fail(const std::string& what) {
    if (error_.is_ok()) error_ = Status::error("cuda backend: " + what);
  }
  bool check(cudaError_t e, const std::string& what) {
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
  bool ensure(void** buf, size_t& cap, size_t need, const char* what) {
    if (need <= cap) return true;
    if (capturing()) {
      fail(std::string(what) + " must grow inside a captured decode step");
      return false;
    }
    check(cudaStreamSynchronize(stream_), what);
    drop_graph(true);  // a recorded step may use the old buffer
    cudaFree(*buf);
    *buf = nullptr;
    cap = 0;
    if (!check(cudaMalloc(buf, need), what)) return false;
    cap = need;
    return true;
  }

  // Copies small host data to device through the pinned ring; returns the device address.
  const void* stage_small(const void* src, size_t bytes) {
    const size_t padded = (bytes + 255) / 256 * 256;
    if (padded > kRingBytes) {
      fail("staged upload too large");
      return nullptr;
    }
    if (ring_offset_ + padded > kRingBytes) {
      // Wrapping: earlier copies out of the ring must have run before their bytes are reused.
      if (!check(cudaStreamSynchronize(stream_), "ring")) return nullptr;
      ring_offset_ = 0;
    }
    std::memcpy(ring_host_ + ring_offset_, src, bytes);
    uint8_t* dst = ring_dev_ + ring_offset_;
    if (!check(
            cudaMemcpyAsync(dst, ring_host_ + ring_offset_, bytes, cudaMemcpyHostToDevice, stream_),
            "staged upload"))
      return nullptr;
    ring_offset_ += padded;
    return dst;
  }

  // inv_freq tables are few and constant per model: one device copy per host pointer, refreshed
  // if the contents change. The upload is an async copy from pinned memory, so it is legal (and
  // replays correctly) inside graph capture.
  const float* device_freqs(const float* host, int64_t n) {
    FreqEntry& e = freqs_[host];
    if (e.dev && e.host.size() == size_t(n) && std::memcmp(e.host.data(), host, size_t(n) * 4) == 0)
      return e.dev;
    if (e.dev && capturing()) {
      fail("rope inv_freq changed inside a captured decode step");
      return nullptr;
    }
    if (e.dev) check(cudaStreamSynchronize(stream_), "freqs");
    if (e.dev && e.host.size() != size_t(n)) {  // another length: new buffers
      cudaFreeHost(e.pinned), cudaFree(e.dev);
      e = {};
    }
    if (!e.dev) {
      if (!check(cudaMallocHost(reinterpret_cast<void**>(&e.pinned), size_t(n) * 4), "freqs") ||
          !check(cudaMalloc(reinterpret_cast<void**>(&e.dev), size_t(n) * 4), "freqs"))
        return nullptr;
    }
    ++freqs_version_;  // device frequencies changed: angle tables made from them are stale
    e.host.assign(host, host + n);
    std::memcpy(e.pinned, host, size_t(n) * 4);
    if (!check(cudaMemcpyAsync(e.dev, e.pinned, size_t(n) * 4, cudaMemcpyHostToDevice, stream_),
               "freqs"))
      return nullptr;
    return e.dev;
  }

  int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  Status error_;
  WeightUploader uploader_;
  uint8_t* ring_host_ = nullptr;
  uint8_t* ring_dev_ = nullptr;
  size_t ring_offset_ = 0;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  float* partials_ = nullptr;
  size_t partials_bytes_ = 0;
  unsigned* norm_counter_ = nullptr;  // GemvNorm's block counter (zero between launches)
  bool fuse_norm_ = false;  // HEARTH_CUDA_FUSE_NORM=1: rmsnorm inside the GEMV + add (experiment)
  int64_t partials_rows_ = -1;  // T * n_heads the counters at the front of partials_ are for
  // The last x quantized for the integer GEMV; any op other than a matmul that leaves x alone
  // calls acts_changed() (ops are few per token, and x's contents are unknown after them).
  void* xq_buf_ = nullptr;
  size_t xq_bytes_ = 0;
  cuda::QuantizedActs xq_;
  const float* xq_src_ = nullptr;
  bool xq_valid_ = false;
  // x's fp16 (or hi + lo) forms left in workspace_ by the last prefill matmul (matmul.cu), so Q,
  // K and V (gate and up) convert their shared x once. HEARTH_CUDA_PREFILL_X_CACHE=0: every
  // matmul converts (A/B).
  cuda::PrefillX prefill_x_;
  bool prefill_x_cache_ = true;
  // The form the last matmul's x took (kNone: a GEMV or no cache), and producers' split slots.
  cuda::PrefillX::Kind last_gemm_kind_ = cuda::PrefillX::kNone;
  cuda::XSplitOut split_slots_;
  bool producer_split_ = true;
  bool rope_rows_kv_ = true;  // prefill rope q/k + K/V append as one launch (flush_rope_rows)
  // The queued prefill rope's positions, and the angle table's (cuda::launch_rope_angles).
  std::vector<int32_t> pending_pos_, angles_pos_;
  float* angles_ = nullptr;
  size_t angles_bytes_ = 0;
  const float* angles_freq_ = nullptr;
  int64_t angles_hd_ = 0;
  uint64_t freqs_version_ = 0, angles_version_ = 0;
  bool matmul_add_ = true;  // HEARTH_CUDA_MATMUL_ADD=0: prefill residual adds as their own kernel
  std::vector<float*> vectors_;
  bool fuse_ = true;         // HEARTH_CUDA_FUSE=0: every op its own launch (A/B and debugging)
  bool int8_model_ = false;  // some weight uses the int8 GEMV: producers quantize their outputs
  struct PendingGemv {
    cuda::GemvJob jobs[3];
    int n = 0;
    bool int8 = false;
    const float* x = nullptr;
    int64_t n_tokens = 0;
    cuda::QuantizedActs xa;
  } pend_;
  struct PendingRope {
    int stage = 0;  // 1: rope q queued, 2: + rope k, 3: + store k, 4: + store v
    float* q = nullptr;
    float* k = nullptr;
    float* k_cache = nullptr;
    float* v_cache = nullptr;
    const float* v = nullptr;
    int64_t nq = 0, nk = 0, hd = 0;
    int64_t nt = 0;         // tokens
    int64_t cache_pos = 0;  // the stores' first cache row
    // Prefill rows (null in a decode step): positions on the host and staged on the device.
    const int32_t* host_pos = nullptr;
    const int32_t* dev_pos = nullptr;
    const float* freq = nullptr;
    int style = 0;
  } rope_;
  std::unique_ptr<CudaProfiler> profiler_;
  std::unordered_map<const float*, FreqEntry> freqs_;

  StepValues* step_host_ = nullptr;
  StepValues* step_dev_ = nullptr;
  cudaEvent_t step_copied_ = nullptr;
  State state_ = State::kIdle;
  bool graphs_enabled_ = true;
  int64_t step_capacity_ = 0;
  int64_t warmed_capacity_ = -1;
  int64_t graph_capacity_ = -1;
  cudaGraphExec_t graph_exec_ = nullptr;
  CudaGreedyChain greedy_;
  int chain_depth_ = 0;  // HEARTH_CUDA_CHAIN (cuda-greedy.h)
};

Status CudaBackend::prepare_weight(Weight& w) {
  if (auto* pw = static_cast<const PreparedWeight*>(w.backend_data.get());
      pw && pw->magic == kCudaWeightMagic && pw->device == device_)
    return Status::ok();
  if (capturing()) return Status::error(w.host.name + ": prepare_weight inside a decode step");
  HEARTH_TRY(error_);
  HEARTH_ASSIGN_OR_RETURN(std::shared_ptr<PreparedWeight> pw,
                          uploader_.upload(w.host, device_, stream_));
  if (cuda::uses_int8_gemv(w.host.dtype)) int8_model_ = true;
  w.backend_data = std::move(pw);
  return Status::ok();
}

// 1 GiB (or half the free memory, if less) read 6 times, best pass after a warm-up one.
std::optional<double> CudaBackend::measure_read_bandwidth_gbs() {
  flush();
  const std::optional<uint64_t> free = device_memory_free();
  if (!free || !error_.is_ok()) return std::nullopt;
  const size_t bytes = size_t(std::min<uint64_t>(uint64_t(1) << 30, *free / 2)) / 256 * 256;
  void* buf = nullptr;
  unsigned* sink = nullptr;
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  std::optional<double> best;
  if (bytes >= (size_t(64) << 20) && cudaMalloc(&buf, bytes) == cudaSuccess &&
      cudaMalloc(reinterpret_cast<void**>(&sink), sizeof(unsigned)) == cudaSuccess &&
      cudaMemsetAsync(buf, 1, bytes, stream_) == cudaSuccess &&
      cudaEventCreate(&t0) == cudaSuccess && cudaEventCreate(&t1) == cudaSuccess) {
    for (int pass = 0; pass < 7; ++pass) {
      float ms = 0;
      if (cudaEventRecord(t0, stream_) != cudaSuccess ||
          cuda::launch_read_probe(buf, bytes, sink, stream_) != cudaSuccess ||
          cudaEventRecord(t1, stream_) != cudaSuccess || cudaEventSynchronize(t1) != cudaSuccess ||
          cudaEventElapsedTime(&ms, t0, t1) != cudaSuccess || ms <= 0)
        break;
      if (pass > 0) best = std::max(best.value_or(0.0), double(bytes) / (ms * 1e-3) / 1e9);
    }
  }
  if (t0) cudaEventDestroy(t0);
  if (t1) cudaEventDestroy(t1);
  cudaFree(sink);
  cudaFree(buf);
  cudaGetLastError();  // a failed probe is no error of the backend's
  return best;
}

Result<float*> CudaBackend::prepare_vector(const TensorView& v) {
  const int64_t n = v.numel();
  if (n <= 0) return Status::error(v.name + ": empty vector");
  if (v.dtype != DType::F32 && v.dtype != DType::F16 && v.dtype != DType::BF16)
    return Status::error(v.name + ": vector dtype " + dtype_name(v.dtype) + " is not a float type");
  std::vector<float> host(static_cast<size_t>(n));
  kernels::dequantize_row(v.dtype, v.data, host.data(), n);
  float* out = alloc(n);
  vectors_.push_back(out);
  if (!check(cudaMemcpy(out, host.data(), size_t(n) * 4, cudaMemcpyHostToDevice), v.name))
    return error_;
  return out;
}

bool CudaBackend::begin_decode_step(int32_t token, int64_t pos, int64_t ctx_capacity) {
  flush();
  acts_changed();
  if (state_ != State::kIdle) {
    fail("begin_decode_step without end_decode_step");
    return false;
  }
  if (pos < 0 || pos >= ctx_capacity || ctx_capacity > INT32_MAX) {
    fail("decode step position " + std::to_string(pos) + " outside the context");
    return false;
  }
  step_capacity_ = ctx_capacity;
  // The previous step's copy reads step_host_; wait for it before overwriting.
  check(cudaEventSynchronize(step_copied_), "step");
  step_host_->token = token;
  step_host_->pos = int32_t(pos);
  check(cudaMemcpyAsync(step_dev_, step_host_, sizeof(StepValues), cudaMemcpyHostToDevice, stream_),
        "step");
  check(cudaEventRecord(step_copied_, stream_), "step");
  if (profiler_ && profiler_->wants_eager()) {
    state_ = State::kEager;
    profiler_->begin_eager_step(stream_);
    return false;
  }
  if (!graphs_enabled_ || !error_.is_ok()) {
    state_ = State::kEager;
    return false;
  }
  if (graph_exec_ && graph_capacity_ == ctx_capacity) {
    if (profiler_) profiler_->begin_replay(stream_);
    check(cudaGraphLaunch(graph_exec_, stream_), "graph launch");
    state_ = State::kReplayed;
    return true;
  }
  if (warmed_capacity_ != ctx_capacity) {
    // First step at this capacity runs eagerly: it sizes every scratch buffer and uploads the
    // rope tables, so the capture that follows allocates nothing.
    warmed_capacity_ = ctx_capacity;
    state_ = State::kEager;
    return false;
  }
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_), graph_exec_ = nullptr;
  if (!check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "capture")) {
    state_ = State::kEager;
    return false;
  }
  state_ = State::kCapturing;
  return false;
}

void CudaBackend::end_decode_step() {
  flush();  // deferred launches belong to this step (and to its graph)
  acts_changed();
  if (profiler_ && state_ == State::kEager && profiler_->wants_eager())
    profiler_->end_eager_step(stream_, long(step_capacity_));
  if (profiler_ && state_ == State::kReplayed) profiler_->end_replay(stream_);
  if (state_ == State::kCapturing) {
    cudaGraph_t graph = nullptr;
    state_ = State::kIdle;
    if (check(cudaStreamEndCapture(stream_, &graph), "end capture") && error_.is_ok()) {
      if (check(cudaGraphInstantiate(&graph_exec_, graph, 0), "graph instantiate")) {
        graph_capacity_ = step_capacity_;
        check(cudaGraphLaunch(graph_exec_, stream_), "graph launch");
      }
    }
    if (graph) cudaGraphDestroy(graph);
  }
  state_ = State::kIdle;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, Status* error) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  auto set = [&](const std::string& msg) {
    if (error) *error = Status::error(msg);
    return nullptr;
  };
  if (e != cudaSuccess) return set(std::string("no CUDA device: ") + cudaGetErrorString(e));
  if (device < 0 || device >= count)
    return set("CUDA device " + std::to_string(device) + " does not exist (" +
               std::to_string(count) + " found)");
  auto backend = std::make_unique<CudaBackend>(device);
  if (Status s = backend->init(); !s.is_ok()) return set(s.message());
  if (error) *error = Status::ok();
  return backend;
}

}  // namespace hearth
