// The CUDA backend's class, shared by its translation units (internal: include only from
// src/backend/cuda). cuda-backend.cpp holds its life cycle, buffers, uploads and decode-step
// capture; cuda-backend-ops.cpp the ops and the queues that fuse them (pend_, rope_, the prefill
// split forms). Short members stay inline here.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda-options.h"
#include "backend/cuda/cuda-greedy.h"
#include "backend/cuda/cuda-profiler.h"
#include "backend/cuda/cuda-weights.h"
#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/gemm-fp8.h"
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

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaOptions& options) : device_(device), opt_(options) {}

  Status init();

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

  void upload(float* dst, const float* src, int64_t n) override;
  void download(float* dst, const float* src, int64_t n) override;
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
    return cuda_weight_device_bytes(h, opt_.fp8_prefill);
  }
  std::optional<double> measure_read_bandwidth_gbs() override;
  Result<float*> prepare_vector(const TensorView& v) override;

  void embed(const Weight& table, const int32_t* ids, int64_t n_tokens, float* out) override;

  void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) override;
  // Prefill: y += x . W^T in the GEMM itself (beta = 1), no product buffer and no add kernel.
  // Decode: the default (matmul, then add_inplace), which the queued GEMV takes into its store.
  void matmul_add(const Weight& w, const float* x, int64_t n_tokens, float* y,
                  float* scratch) override;

  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
               float eps) override;

  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
            const float* inv_freq, kernels::RopeStyle style) override;

  // The KV cache: f32 rows only so far (supports_kv_type), so the typed entry points hand their
  // rows to the f32 ops below (KvCache keeps f32 rows on this backend's layers).
  bool supports_kv_type(DType t) const override { return t == DType::F32; }
  void attention(const float* q, const kernels::KvRows& k, const kernels::KvRows& v, float* out,
                 int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, float scale) override {
    attention(q, f32_rows(k), f32_rows(v), out, n_tokens, pos0, n_heads, n_kv_heads, head_dim,
              scale);
  }
  void store_kv(void* cache, DType type, const float* src, int64_t pos, int64_t row_floats,
                int64_t n_tokens, int64_t ring_rows = 0) override {
    store_kv(static_cast<float*>(f32_rows({cache, type})), src, pos, row_floats, n_tokens,
             ring_rows);
  }
  void attention_masked(const float* q, const kernels::KvRows& k, const kernels::KvRows& v,
                        float* out, int64_t n_tokens, int64_t pos0, int64_t n_heads,
                        int64_t n_kv_heads, int64_t head_dim, float scale,
                        const kernels::AttentionMask& mask) override {
    attention_masked(q, f32_rows(k), f32_rows(v), out, n_tokens, pos0, n_heads, n_kv_heads,
                     head_dim, scale, mask);
  }
  static float* f32_rows(const kernels::KvRows& rows) {
    if (rows.type != DType::F32) {
      std::fprintf(stderr, "hearth: internal error: cuda KV rows of type %s\n",
                   dtype_name(rows.type));
      std::abort();
    }
    return static_cast<float*>(const_cast<void*>(rows.data));
  }
  void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                 int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                 int64_t head_dim, float scale);

  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void add_inplace(float* y, const float* x, int64_t n) override;
  void add_bias(float* y, const float* b, int64_t rows, int64_t n) override;

  void store_kv(float* cache, const float* src, int64_t pos, int64_t row_floats, int64_t n_tokens,
                int64_t ring_rows = 0);

  // The families' ops (cuda-backend-family-ops.cpp).
  uint32_t features() const override;
  void rmsnorm_heads(float* x, const float* w, int64_t rows, int64_t head_dim, float eps) override;
  void attention_masked(const float* q, const float* k_cache, const float* v_cache, float* out,
                        int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                        int64_t head_dim, float scale, const kernels::AttentionMask& mask);
  void rope_partial(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const int32_t* pos, const float* inv_freq, kernels::RopeStyle style,
                    float mscale) override;
  void gelu_tanh_gated(const float* gate, const float* up, float* out, int64_t n) override;
  void softcap(float* x, int64_t n, float cap) override;
  void scale(float* x, int64_t n, float s) override;

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
    return opt_.graphs && !profiler_ ? opt_.greedy_chain_depth : 0;
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
    if (state_ != State::kIdle || !opt_.graphs || profiler_ || !error_.is_ok() || !graph_exec_ ||
        graph_capacity_ != ctx_capacity || pos < 0 || pos >= ctx_capacity)
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

  // An op outside every fusion: the queued work first (it may feed this op), then launch(),
  // profiled as `family` and checked as `op`.
  template <class Launch>
  void unfused_op(const char* family, const char* op, Launch&& launch) {
    flush();
    acts_changed();
    const int m = prof(family);
    check(launch(), op);
    unprof(m);
  }

  // The step's device position for an op of n_tokens at `pos` inside a decode step (null
  // outside one); a captured op at any other position is an error (fail(), null).
  const int32_t* step_pos_or_null(int64_t n_tokens, int64_t pos, const char* op);
  // store_kv into a ring cache: the row wrapped on the device.
  void store_kv_ring(float* cache, const float* src, int64_t pos, int64_t row_floats,
                     int64_t n_tokens, int64_t ring_rows);

  void matmul_into(const Weight& w, const float* x, int64_t n_tokens, float* y, bool accumulate);

  // Slots for a producer (prefill rmsnorm, swiglu) to write its output's split forms, so the
  // GEMM reading it skips the split pass: only while the last matmul was a prefill GEMM that
  // took those forms (an F16/BF16 model's prefill; it implies a prefill-sized output). Null
  // otherwise. CudaOptions::producer_split = false turns it off (A/B).
  const cuda::XSplitOut* producer_split(int64_t n);

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
  void flush_gemv();
  struct PendingRope;  // below, with the other queued work
  // A decode step's rope/store sequence that did not complete the fused pattern: run its parts.
  void flush_rope();
  // A queued prefill rope/store sequence: one launch when complete, else its parts.
  void flush_rope_rows(const PendingRope& r);
  void launch_rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                   const int32_t* pos, const float* freq, int style);

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
  bool ensure(void** buf, size_t& cap, size_t need, const char* what);

  // Copies small host data to device through the pinned ring; returns the device address.
  const void* stage_small(const void* src, size_t bytes);

  // inv_freq tables are few and constant per model: one device copy per host pointer, refreshed
  // if the contents change. The upload is an async copy from pinned memory, so it is legal (and
  // replays correctly) inside graph capture.
  const float* device_freqs(const float* host, int64_t n);

  int device_;
  const CudaOptions opt_;
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
  int64_t partials_rows_ = -1;  // T * n_heads the counters at the front of partials_ are for
  // The last x quantized for the integer GEMV; any op other than a matmul that leaves x alone
  // calls acts_changed() (ops are few per token, and x's contents are unknown after them).
  void* xq_buf_ = nullptr;
  size_t xq_bytes_ = 0;
  cuda::QuantizedActs xq_;
  const float* xq_src_ = nullptr;
  bool xq_valid_ = false;
  // x's fp16 (or hi + lo) forms left in workspace_ by the last prefill matmul (matmul.cu), so Q,
  // K and V (gate and up) convert their shared x once (unless CudaOptions::prefill_x_cache is
  // off: every matmul converts).
  cuda::PrefillX prefill_x_;
  // The form the last matmul's x took (kNone: a GEMV or no cache), and producers' split slots.
  cuda::PrefillX::Kind last_gemm_kind_ = cuda::PrefillX::kNone;
  cuda::XSplitOut split_slots_;
  // The queued prefill rope's positions, and the angle table's (cuda::launch_rope_angles).
  std::vector<int32_t> pending_pos_, angles_pos_;
  float* angles_ = nullptr;
  size_t angles_bytes_ = 0;
  const float* angles_freq_ = nullptr;
  int64_t angles_hd_ = 0;
  uint64_t freqs_version_ = 0, angles_version_ = 0;
  std::vector<float*> vectors_;
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
    // Prefill rows (null in a decode step): positions staged on the device (pending_pos_ holds
    // them on the host).
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
  int64_t step_capacity_ = 0;
  int64_t warmed_capacity_ = -1;
  int64_t graph_capacity_ = -1;
  cudaGraphExec_t graph_exec_ = nullptr;
  CudaGreedyChain greedy_;
};

}  // namespace hearth::cuda_impl
