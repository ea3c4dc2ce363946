// The CUDA backend: one stream, cuBLAS for prefill GEMMs, pinned staging for uploads, and decode
// steps captured once into a CUDA graph then replayed with (token, pos) read from device memory.
// Fusions are Backend's named ops (cuda-backend-ops.cpp, cuda-backend-attention.cpp).
// New op: add its launcher to kernels/cuda/cuda-ops.h and forward to it here.
#include "backend/cuda/cuda-backend.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <thread>

#include "backend/cuda/cuda-backend-impl.h"
#include "base/log.h"
#include "kernels/cuda/cublas-loader.h"

namespace hearth::cuda_impl {

Status CudaBackend::init() {
  if (!check(cudaSetDevice(device_), "cudaSetDevice")) return error_;
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  const int upload_threads = opt_.upload_threads > 0 ? opt_.upload_threads : std::min(8, hw);
  if (const Status st = uploader_.init(device_, upload_threads); !st.is_ok()) fail(st.message());
  check(cudaMallocHost(reinterpret_cast<void**>(&ring_host_), kRingBytes), "pinned ring");
  check(cudaMalloc(reinterpret_cast<void**>(&ring_dev_), kRingBytes), "device ring");
  check(cudaMallocHost(reinterpret_cast<void**>(&step_host_), sizeof(StepValues)), "step");
  check(cudaMalloc(reinterpret_cast<void**>(&step_dev_), sizeof(StepValues)), "step");
  check(cudaEventCreateWithFlags(&step_copied_, cudaEventDisableTiming), "event");
  if (opt_.profile) profiler_ = std::make_unique<CudaProfiler>(opt_.graphs);
  kv_memory_ = std::make_unique<CudaKvMemory>(device_, 0, opt_.kv_map_ahead);
  return error_;
}

void CudaBackend::upload(float* dst, const float* src, int64_t n) {
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

void CudaBackend::download(float* dst, const float* src, int64_t n) {
  if (src == folded_.xn) settle_folded_norm();
  if (capturing()) return fail("download inside a captured decode step");
  check(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "download");
  check(cudaStreamSynchronize(stream_), "download");
  if (profiler_) profiler_->end_prefill(stream_);  // the logits download ends a prefill pass
}

void CudaBackend::pick_rows(const float* logits, int64_t rows, int64_t n_vocab,
                            std::span<const RowDraw> draws, int32_t* ids) {
  if (capturing()) return fail("pick_rows inside a captured decode step");
  if (rows <= 0) return;
  const int64_t D = int64_t(draws.size());
  if (!ensure(row_picks_, size_t(rows) * sizeof(int32_t), "row picks")) return;
  auto* dev_ids = row_picks_.as<int32_t>();
  if (!check(cuda::launch_argmax_rows(logits, rows, n_vocab, dev_ids, stream_), "argmax rows"))
    return;
  if (D > 0) {
    // Every draw in one launch (a cluster a row): its rule, row and position go up in the ring.
    std::vector<cuda::SampleRowPick> table(static_cast<size_t>(D));
    for (int64_t i = 0; i < D; ++i) {
      const RowDraw& d = draws[size_t(i)];
      if (d.row < 0 || d.row >= rows || d.rule.penalizes() || d.pos < 0 || d.pos >= INT32_MAX)
        return fail("pick_rows: a draw out of range or with penalties");
      cuda::SampleRowPick& t = table[size_t(i)];
      t.p.temperature = d.rule.temperature;
      t.p.top_k = d.rule.top_k;
      t.p.top_p = d.rule.top_p;
      t.p.min_p = d.rule.min_p;
      t.p.seed = d.rule.seed;
      t.row = int32_t(d.row);
      t.next_pos = int32_t(d.pos + 1);
    }
    const void* staged = stage_small(table.data(), table.size() * sizeof(table[0]));
    if (!staged) return;
    (void)cuda::sample_pick_cluster_blocks(n_vocab);  // (its one device query; not capturing)
    if (!check(cuda::launch_sample_picks(logits, n_vocab,
                                         static_cast<const cuda::SampleRowPick*>(staged), D,
                                         dev_ids, stream_),
               "row draws"))
      return;
  }
  check(cudaMemcpyAsync(ids, dev_ids, size_t(rows) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                        stream_),
        "row picks");
  check(cudaStreamSynchronize(stream_), "row picks");
  if (profiler_) profiler_->end_prefill(stream_);  // as download(): the pass ends here
}

bool CudaBackend::ensure(DeviceScratch& buf, size_t need, const char* what) {
  if (need <= buf.bytes) return true;
  if (capturing()) {
    fail(std::string(what) + " must grow inside a captured decode step");
    return false;
  }
  check(cudaStreamSynchronize(stream_), what);
  drop_graph(true);  // a recorded step may use the old buffer
  cudaFree(buf.ptr);
  // At least half again the old size: a server's passes grow (more sequences, deeper caches)
  // and each growth waits for the device, so growths stay a handful, not one per new size.
  const size_t grown = std::max(need, buf.bytes + buf.bytes / 2);
  log_debug(std::string("CUDA scratch '") + what + "' grows from " +
            std::to_string(buf.bytes >> 10) + " to " + std::to_string(grown >> 10) + " KiB");
  buf = {};
  if (cudaMalloc(&buf.ptr, grown) == cudaSuccess) {
    buf.bytes = grown;
    return true;
  }
  cudaGetLastError();  // not an error yet: the exact size may still fit
  cudaError_t e = cudaMalloc(&buf.ptr, need);
  if (e != cudaSuccess && drop_half_copies()) {  // the weights' fp16 copies give way
    cudaGetLastError();
    e = cudaMalloc(&buf.ptr, need);
  }
  if (!check(e, what)) return false;
  buf.bytes = need;
  return true;
}

const void* CudaBackend::stage_small(const void* src, size_t bytes) {
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
  uint8_t* dst = ring_dev_ + ring_offset_;
  // A small table rides in a kernel's parameters: a copy would stall the stream between two
  // kernels, where the kernel keeps the PDL chain going (a decode step of many sequences uploads
  // one a layer: +4-6% at 64 sequences, H200). A recorded step keeps the copy node it had.
  if (!capturing() && bytes <= sizeof(cuda::ParamTable::words)) {
    if (!check(cuda::launch_param_table(src, bytes, dst, stream_), "staged upload")) return nullptr;
  } else {
    std::memcpy(ring_host_ + ring_offset_, src, bytes);
    if (!check(
            cudaMemcpyAsync(dst, ring_host_ + ring_offset_, bytes, cudaMemcpyHostToDevice, stream_),
            "staged upload"))
      return nullptr;
  }
  ring_offset_ += padded;
  return dst;
}

const float* CudaBackend::device_freqs(const float* host, int64_t n) {
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

Status CudaBackend::prepare_weight(Weight& w) {
  if (auto* pw = static_cast<const PreparedWeight*>(w.backend_data.get());
      pw && pw->magic == kCudaWeightMagic && pw->device == device_)
    return Status::ok();
  if (capturing()) return Status::error(w.host.name + ": prepare_weight inside a decode step");
  HEARTH_TRY(error_);
  HEARTH_ASSIGN_OR_RETURN(std::shared_ptr<PreparedWeight> pw, uploader_.upload(w.host, device_));
  if (cuda::uses_int8_gemv(w.host.dtype)) int8_model_ = true;
  w.backend_data = std::move(pw);
  return Status::ok();
}

void CudaBackend::begin_loading_weights() {
  uploader_.begin_batch();
}

Status CudaBackend::finish_loading_weights() {
  // Opening cuBLAS (tens of ms of relocations) runs beside the rest of the start-up: a short
  // prompt never waits for it, a long one's first GEMM waits only for what is left of it.
  if (!blas_preload_.joinable()) blas_preload_ = std::thread([] { cuda::cublas_load(); });
  if (opt_.preload_kernels && !kernel_preload_.joinable())
    kernel_preload_ = std::thread([device = device_] { preload_kernels(device); });
  // The upload stream was synchronized: the weights are there for every stream.
  return uploader_.end_batch();
}

// (a failure leaves the kernels to load at their first launches, as without the option)
void CudaBackend::preload_kernels(int device) {
  if (cudaSetDevice(device) != cudaSuccess) return;
  const auto t0 = std::chrono::steady_clock::now();
  cuda::KernelPreload r;
  const cudaError_t e = cuda::preload_kernel_modules(&r);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (e != cudaSuccess)
    log_debug(std::string("CUDA kernels not preloaded: ") + cudaGetErrorString(e));
  else
    log_debug("CUDA kernels preloaded: " + std::to_string(r.loaded) + " of " +
              std::to_string(r.functions) + " in " + std::to_string(r.modules) + " modules, " +
              std::to_string(int(ms)) + " ms");
}

cublasHandle_t CudaBackend::blas() {
  if (blas_) return blas_;
  if (const std::string& why = cuda::cublas_load(); !why.empty()) {
    fail(why);
    return nullptr;
  }
  if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) {
    blas_ = nullptr;
    fail("cublasCreate failed");
  }
  return blas_;
}

// 1 GiB (or half the free memory, if less) read 6 times, best pass after a warm-up one.
std::optional<double> CudaBackend::measure_read_bandwidth_gbs() {
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
  if (!opt_.graphs || !error_.is_ok()) {
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
  drop_graph(true);  // (kept as stale_exec_: the capture below updates it)
  if (!check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "capture")) {
    state_ = State::kEager;
    return false;
  }
  state_ = State::kCapturing;
  return false;
}

void CudaBackend::end_decode_step() {
  if (profiler_ && state_ == State::kEager && profiler_->wants_eager())
    profiler_->end_eager_step(stream_, long(step_capacity_));
  if (profiler_ && state_ == State::kReplayed) profiler_->end_replay(stream_);
  if (state_ == State::kCapturing) {
    cudaGraph_t graph = nullptr;
    state_ = State::kIdle;
    if (check(cudaStreamEndCapture(stream_, &graph), "end capture") && error_.is_ok()) {
      if (stale_exec_) {
        cudaGraphExecUpdateResultInfo info{};
        if (cudaGraphExecUpdate(stale_exec_, graph, &info) == cudaSuccess) {
          graph_exec_ = stale_exec_;
        } else {
          cudaGetLastError();  // not an error of the backend's: instantiated below instead
          cudaGraphExecDestroy(stale_exec_);
        }
        stale_exec_ = nullptr;
      }
      if (graph_exec_ || check(cudaGraphInstantiate(&graph_exec_, graph, 0), "graph instantiate")) {
        graph_capacity_ = step_capacity_;
        check(cudaGraphLaunch(graph_exec_, stream_), "graph launch");
      }
    }
    if (graph) cudaGraphDestroy(graph);
  }
  state_ = State::kIdle;
}

}  // namespace hearth::cuda_impl

namespace hearth {

using cuda_impl::CudaBackend;

std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options, Status* error) {
  auto set = [&](const std::string& msg) {
    if (error) *error = Status::error(msg);
    return nullptr;
  };
  // Options first: a bad field is the caller's error whatever the machine has.
  if (const std::string bad = cuda_options_error(options); !bad.empty())
    return set("cuda backend: " + bad);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return set(std::string("no CUDA device: ") + cudaGetErrorString(e));
  if (device < 0 || device >= count)
    return set("CUDA device " + std::to_string(device) + " does not exist (" +
               std::to_string(count) + " found)");
  auto backend = std::make_unique<CudaBackend>(device, options);
  if (Status s = backend->init(); !s.is_ok()) return set(s.message());
  if (error) *error = Status::ok();
  return backend;
}

}  // namespace hearth
