// The weight upload pipeline (cuda-weight-upload.h): a ring of pinned slots filled by host
// threads, drained by one issuer thread in chunk order onto the upload stream.
#include "backend/cuda/cuda-weight-upload.h"

#include <algorithm>
#include <cstring>

#include "base/mapped-file.h"
#include "tensor/dtype.h"

namespace hearth {

namespace {

Status cuda_status(cudaError_t e, const std::string& what) {
  return e == cudaSuccess ? Status::ok() : Status::error(what + ": " + cudaGetErrorString(e));
}

}  // namespace

WeightUploader::~WeightUploader() {
  if (open_) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      abort_ = true;
    }
    (void)end_batch();
  }
  if (releaser_.joinable()) releaser_.join();
  for (cudaEvent_t e : done_)
    if (e) cudaEventDestroy(e);
  if (ring_) cudaFreeHost(ring_);
  if (stream_) cudaStreamDestroy(stream_);
}

Status WeightUploader::init(int device, int threads) {
  device_ = device;
  threads_ = std::max(1, threads);
  HEARTH_TRY(
      cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "upload stream"));
  HEARTH_TRY(cuda_status(cudaMallocHost(reinterpret_cast<void**>(&ring_), kSlots * kSlotBytes),
                         "pinned staging"));
  for (cudaEvent_t& e : done_)
    HEARTH_TRY(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event"));
  return Status::ok();
}

void WeightUploader::begin_batch() {
  if (open_) return;
  open_ = true;
  closed_ = abort_ = false;
  error_ = Status::ok();
  jobs_.clear();
  chunks_.clear();
  next_chunk_ = 0;
  for (int s = 0; s < kSlots; ++s) issued_[s] = s - kSlots, filled_[s] = -1;
  for (int i = 0; i < threads_; ++i) workers_.emplace_back([this] { fill_loop(); });
  issuer_ = std::thread([this] { issue_loop(); });
}

Status WeightUploader::end_batch() {
  if (!open_) return Status::ok();
  {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  issuer_.join();
  open_ = false;
  // Every DMA and repack queued has read its slot and scratch_ once this returns.
  Status st = error_;
  const Status synced = cuda_status(cudaStreamSynchronize(stream_), "weight upload");
  if (st.is_ok()) st = synced;
  cudaFree(scratch_);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  if (st.is_ok()) release_sources();
  jobs_.clear();
  chunks_.clear();
  return st;
}

void WeightUploader::release_sources() {
  // Every chunk was copied into the ring (the DMAs read only the ring), so nothing reads these
  // bytes for the upload any more; a later host read faults them back in.
  std::vector<std::pair<const uint8_t*, uint64_t>> ranges;
  uint64_t total = 0;
  for (const Job& j : jobs_) {
    ranges.emplace_back(j.src, j.raw_bytes);
    total += j.raw_bytes;
  }
  if (releaser_.joinable()) releaser_.join();
  auto release = [ranges = std::move(ranges)] {
    for (const auto& [p, n] : ranges) MappedFile::release_pages(p, n);
  };
  // A lone weight (an upload outside a batch) is not worth a thread.
  if (total < kSlotBytes * kSlots) {
    release();
  } else {
    releaser_ = std::thread(std::move(release));
  }
}

void WeightUploader::fail(const Status& st) {
  if (error_.is_ok()) error_ = st;
  abort_ = true;
  cv_.notify_all();
}

Result<std::shared_ptr<PreparedWeight>> WeightUploader::upload(const TensorView& h, int device) {
  if (!cuda::supports_dtype(h.dtype))
    return Status::error(h.name + ": dtype " + dtype_name(h.dtype) + " has no CUDA kernels");
  if (h.shape.empty() || h.shape.size() > 2 || h.numel() <= 0)
    return Status::error(h.name + ": CUDA weights must be 1-D or 2-D, got " +
                         shape_string(h.shape));
  const int64_t rows = h.rows(), cols = h.cols();
  const auto rb = row_bytes(h.dtype, uint64_t(cols));
  if (!rb)
    return Status::error(h.name + ": row of " + std::to_string(cols) +
                         " elements is not a whole number of " + dtype_name(h.dtype) + " blocks");
  const uint64_t raw_bytes = *rb * uint64_t(rows);
  if (h.nbytes < raw_bytes || !h.data)
    return Status::error(h.name + ": holds " + std::to_string(h.nbytes) + " bytes, shape needs " +
                         std::to_string(raw_bytes));

  const cuda::PackedLayout layout = cuda::packed_layout(h.dtype, rows, cols);
  // Owns the device memory from here on, whatever fails below.
  std::shared_ptr<PreparedWeight> pw(new PreparedWeight, [](PreparedWeight* p) {
    cudaFree(p->mem);
    cudaFree(p->fp8_mem);
    cudaFree(p->half_mem);
    delete p;
  });
  pw->device = device;
  HEARTH_TRY(cuda_status(cudaMalloc(&pw->mem, layout.total_bytes), "weight " + h.name));
  pw->dw = cuda::make_device_weight(h.dtype, rows, cols, static_cast<uint8_t*>(pw->mem));

  const bool own_batch = !open_;
  if (own_batch) begin_batch();
  Status stopped;  // the batch failed on an earlier weight: this one is not queued
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (abort_) {
      stopped = error_;
    } else {
      const auto job = uint32_t(jobs_.size());
      const auto* src = static_cast<const uint8_t*>(h.data);
      jobs_.push_back({h.name, src, h.dtype, rows, cols, static_cast<uint8_t*>(pw->mem), raw_bytes,
                       layout.needs_repack});
      for (uint64_t off = 0; off < raw_bytes; off += kSlotBytes) {
        const auto n = uint32_t(std::min<uint64_t>(kSlotBytes, raw_bytes - off));
        chunks_.push_back({off, n, job, off + n == raw_bytes});
      }
    }
  }
  cv_.notify_all();
  if (own_batch) HEARTH_TRY(end_batch());
  HEARTH_TRY(stopped);
  return pw;
}

void WeightUploader::fill_loop() {
  cudaSetDevice(device_);  // events belong to device_'s context; each thread picks its own
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return abort_ || closed_ || next_chunk_ < chunks_.size(); });
    if (abort_ || next_chunk_ >= chunks_.size()) return;  // (closed and every chunk taken)
    const auto j = int64_t(next_chunk_++);
    const Chunk c = chunks_[size_t(j)];
    const uint8_t* src = jobs_[c.job].src + c.offset;
    const int slot = int(j % kSlots);
    cv_.wait(lk, [&] { return abort_ || issued_[slot] == j - kSlots; });
    if (abort_) return;
    lk.unlock();
    // The slot's previous DMA must have read it before its bytes are overwritten.
    const cudaError_t e = j >= kSlots ? cudaEventSynchronize(done_[slot]) : cudaSuccess;
    if (e == cudaSuccess) std::memcpy(ring_ + size_t(slot) * kSlotBytes, src, c.bytes);
    lk.lock();
    if (e != cudaSuccess) return fail(cuda_status(e, "staging"));
    filled_[slot] = j;
    cv_.notify_all();
  }
}

void WeightUploader::issue_loop() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lk(mu_);
  for (int64_t j = 0;; ++j) {
    const int slot = int(j % kSlots);
    cv_.wait(lk, [&] {
      return abort_ || filled_[slot] == j || (closed_ && size_t(j) >= chunks_.size());
    });
    if (abort_ || filled_[slot] != j) return;
    const Chunk c = chunks_[size_t(j)];
    const Job job = jobs_[c.job];
    lk.unlock();
    const Status st = issue(c, job, slot);
    lk.lock();
    if (!st.is_ok()) return fail(st);
    issued_[slot] = j;
    cv_.notify_all();
  }
}

Status WeightUploader::issue(const Chunk& c, const Job& job, int slot) {
  uint8_t* dst = job.packed;
  if (job.repack) {
    if (c.offset == 0 && scratch_bytes_ < job.raw_bytes) {
      // Queued work may still read the old scratch: wait for it first.
      HEARTH_TRY(cuda_status(cudaStreamSynchronize(stream_), "repack scratch"));
      cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      HEARTH_TRY(cuda_status(cudaMalloc(reinterpret_cast<void**>(&scratch_), job.raw_bytes),
                             "weight " + job.name));
      scratch_bytes_ = job.raw_bytes;
    }
    dst = scratch_;
  }
  HEARTH_TRY(cuda_status(cudaMemcpyAsync(dst + c.offset, ring_ + size_t(slot) * kSlotBytes, c.bytes,
                                         cudaMemcpyHostToDevice, stream_),
                         "upload " + job.name));
  HEARTH_TRY(cuda_status(cudaEventRecord(done_[slot], stream_), "staging"));
  // One stream: the next weight's DMA into scratch_ is queued after this repack read it.
  if (job.repack && c.last)
    HEARTH_TRY(cuda_status(
        cuda::launch_repack(job.dtype, scratch_, job.packed, job.rows, job.cols, stream_),
        "repack " + job.name));
  return Status::ok();
}

}  // namespace hearth
