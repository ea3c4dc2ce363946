// The weight upload pipeline: host threads copy weights' bytes from the mapped file into a ring
// of pinned slots while one issuer thread queues each filled slot's DMA (and, after a weight's
// last slot, its repack) on the upload stream. A batch keeps it running across weights, so no
// weight waits for the one before it. New per-weight step: in WeightUploader::issue.
// Once a batch is done its weights' source pages leave the process (MappedFile::release_pages)
// on a background thread: a model on the GPU does not keep its file resident in the host's
// memory, and the release (a few hundred ms for a 7B) stays off the first token's path.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda-weights.h"
#include "base/status.h"
#include "tensor/tensor-view.h"

namespace hearth {

class WeightUploader {
 public:
  // A 7B Q4_0 file is ~480 slots: DMA calls stay a few microseconds each against ~80 us of
  // transfer, and the ring (64 MiB pinned) is quick to allocate at start-up.
  static constexpr int kSlots = 16;
  static constexpr size_t kSlotBytes = size_t(4) << 20;

  WeightUploader() = default;
  WeightUploader(const WeightUploader&) = delete;
  WeightUploader& operator=(const WeightUploader&) = delete;
  ~WeightUploader();  // ends an open batch (its error is dropped), waits for a release, frees

  // threads: host threads filling the slots (the memcpy out of the page cache is what limits a
  // warm load: one thread moves ~5-10 GB/s, the PCIe link takes ~50).
  Status init(int device, int threads);

  // Between begin_batch and end_batch, upload() only queues: it returns once the weight's device
  // memory exists (its DeviceWeight pointers are final), before its bytes have arrived.
  // end_batch waits for every queued weight and returns the first error; it must run before the
  // weights are read or freed. Outside a batch, upload() waits for its own weight.
  void begin_batch();
  Status end_batch();
  // h -> device (repacked where the kernels want it); the result owns its device memory.
  Result<std::shared_ptr<PreparedWeight>> upload(const TensorView& h, int device);

 private:
  struct Job {  // one weight
    std::string name;
    const uint8_t* src = nullptr;  // its host bytes (released once the batch is done)
    DType dtype = DType::F32;
    int64_t rows = 0, cols = 0;
    uint8_t* packed = nullptr;  // its device memory (the kernels' layout)
    uint64_t raw_bytes = 0;
    bool repack = false;  // raw bytes go to scratch_, then launch_repack into packed
  };
  struct Chunk {          // one slot's worth of one weight
    uint64_t offset = 0;  // into the weight's raw bytes (jobs_[job].src + offset)
    uint32_t bytes = 0;
    uint32_t job = 0;
    bool last = false;
  };

  void fill_loop();   // a worker: chunk -> its slot
  void issue_loop();  // the issuer: filled slot -> DMA (+ repack)
  Status issue(const Chunk& c, const Job& job, int slot);
  void fail(const Status& st);  // under mu_: stops the batch, keeps the first error
  void release_sources();       // the finished batch's host pages, in the background

  int device_ = 0;
  int threads_ = 1;
  cudaStream_t stream_ = nullptr;
  uint8_t* ring_ = nullptr;  // kSlots * kSlotBytes pinned
  cudaEvent_t done_[kSlots] = {};
  // Raw bytes of the weight being repacked; grown (rarely: the largest weight sets it) by the
  // issuer, freed at end_batch.
  uint8_t* scratch_ = nullptr;
  uint64_t scratch_bytes_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false, closed_ = false, abort_ = false;
  Status error_;
  std::vector<Job> jobs_;
  std::vector<Chunk> chunks_;
  size_t next_chunk_ = 0;  // the next chunk a worker takes
  // Per slot: the chunk whose DMA was queued from it last, and the chunk copied into it last.
  // Chunk j uses slot j % kSlots once chunk j - kSlots has been queued (and its DMA is done).
  int64_t issued_[kSlots] = {};
  int64_t filled_[kSlots] = {};
  std::vector<std::thread> workers_;
  std::thread issuer_;
  std::thread releaser_;  // the last batch's release_sources
};

}  // namespace hearth
