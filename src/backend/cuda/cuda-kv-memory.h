// Paged KV memory on CUDA through the driver's virtual memory API (cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), whose
// entry points come from cudaGetDriverEntryPointByVersion so the backend does not link libcuda.
// A KV cache reserves its whole range once (its kernels keep addressing base + p * row; a
// recorded decode step stays valid, the addresses never move) and granules of physical memory
// are mapped into it as the sequence grows. Unmapped granules go to a free list (cuMemCreate
// is slow) up to kFreeListBytes; beyond that they are released to the device.
// Internal to src/backend/cuda; the CudaBackend owns one. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace hearth::cuda_impl {

class CudaKvMemory {
 public:
  static constexpr uint64_t kFreeListBytes = uint64_t(512) << 20;

  // Finds the entry points and the device's granularity; available() is false when the driver
  // or device lacks the API (the backend then allocates caches whole).
  explicit CudaKvMemory(int device);
  ~CudaKvMemory();
  CudaKvMemory(const CudaKvMemory&) = delete;

  bool available() const { return granularity_ > 0; }
  uint64_t granularity() const { return granularity_; }
  void* reserve(uint64_t bytes);  // nullptr when the address space cannot be had
  // Offsets and sizes in whole granules; the caller has synchronized before decommit/unreserve.
  bool commit(void* base, uint64_t offset, uint64_t bytes);
  void decommit(void* base, uint64_t offset, uint64_t bytes);
  void unreserve(void* base);
  // Granules mapped now, and kept on the free list (tests, metrics).
  uint64_t mapped_granules() const { return mapped_; }
  uint64_t free_granules() const { return free_.size(); }

 private:
  struct Api;
  struct Range {
    uint64_t bytes = 0;
    std::vector<unsigned long long> handles;  // per granule; 0: not mapped
  };
  void unmap(Range& r, uintptr_t base, uint64_t first, uint64_t count);
  int device_;
  uint64_t granularity_ = 0;
  std::mutex mu_;  // sessions on several threads may share the backend
  std::unique_ptr<Api> api_;
  std::map<uintptr_t, Range> ranges_;
  std::vector<unsigned long long> free_;
  uint64_t mapped_ = 0;
};

}  // namespace hearth::cuda_impl
