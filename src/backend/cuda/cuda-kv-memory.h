// Paged KV memory on CUDA through the driver's virtual memory API (cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), whose
// entry points come from cudaGetDriverEntryPointByVersion so the backend does not link libcuda.
// A KV cache reserves its whole range once (its kernels keep addressing base + p * row; a
// recorded decode step stays valid, the addresses never move) and granules of physical memory
// are mapped into it as the sequence grows.
// Decommitted granules stay mapped, parked, up to a byte limit (oldest unmapped first): the
// driver calls are slow (a request's 7B cache of 64 granules cost tens of milliseconds to map
// and unmap, most of a short request's time to first token), and a server slot or session
// that grows into the same rows again gets them back with no driver call. Parked granules are
// the first taken when a commit elsewhere needs memory. Unmapped granules go to a free list
// (cuMemCreate is slow too) up to kFreeListBytes; beyond that they are released to the device.
// Mapping ahead (an option): a fresh reservation's first granule is mapped by a background
// thread and parked, within the parked limit, so a new cache's first commit (a served request's
// first block: 64 granules, ~3 ms on an H200 for a 7B) makes no driver call on the step's path.
// Internal to src/backend/cuda; the CudaBackend owns one. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth::cuda_impl {

class CudaKvMemory {
 public:
  static constexpr uint64_t kFreeListBytes = uint64_t(512) << 20;

  // Finds the entry points and the device's granularity; available() is false when the driver
  // or device lacks the API (the backend then allocates caches whole).
  // parked_limit: bytes of decommitted granules kept mapped (0: device memory / 8).
  // map_ahead: each new reservation's first granule mapped (parked) by a background thread.
  explicit CudaKvMemory(int device, uint64_t parked_limit = 0, bool map_ahead = false);
  ~CudaKvMemory();
  CudaKvMemory(const CudaKvMemory&) = delete;

  bool available() const { return granularity_ > 0; }
  uint64_t granularity() const { return granularity_; }
  void* reserve(uint64_t bytes);  // nullptr when the address space cannot be had
  // Offsets and sizes in whole granules; the caller has synchronized before unreserve (commit
  // and decommit synchronize the device themselves before they unmap a granule).
  bool commit(void* base, uint64_t offset, uint64_t bytes);
  void decommit(void* base, uint64_t offset, uint64_t bytes);
  void unreserve(void* base);
  // Queues a reservation's first granule for mapping ahead again (when mapping ahead is on and
  // the granule is not mapped): one that the parked limit left out when it was reserved, now
  // about to be used.
  void map_ahead(void* base);
  // Granules mapped now (parked ones included), parked, and kept on the free list (tests).
  uint64_t mapped_granules() const { return mapped_; }
  uint64_t parked_granules() const { return parked_count_; }
  uint64_t free_granules() const { return free_.size(); }
  // Waits until the reservations made so far have been mapped ahead (tests).
  void wait_mapped_ahead();

 private:
  struct Api;
  struct Range {
    uint64_t bytes = 0;
    std::vector<unsigned long long> handles;  // per granule; 0: not mapped
    std::vector<uint8_t> parked;              // per granule: mapped but decommitted
  };
  void unmap(Range& r, uintptr_t base, uint64_t first, uint64_t count);
  // A handle for a granule about to be mapped: the free list, else a new one, else the oldest
  // parked granule's (unmapped). 0 when the device has no memory left.
  unsigned long long take_handle();
  void park(Range& r, uintptr_t base, uint64_t i);  // granule i of a mapped range, decommitted
  bool unmap_oldest_parked();                       // false when nothing is parked
  void trim_parked();  // unmaps the oldest parked granules beyond the limit
  void map_ahead_loop();
  // Whether the range at base is gone or its first granule mapped (lock held).
  bool first_mapped_or_gone(uintptr_t base) const;
  // Maps granule 0 of the range at base and parks it (lock held on entry and return; let go
  // around cuMemCreate); false when no more should be mapped ahead (the parked limit reached,
  // or the device out of memory).
  bool map_ahead_one(std::unique_lock<std::mutex>& lock, uintptr_t base);
  int device_;
  uint64_t granularity_ = 0;
  std::mutex mu_;  // sessions on several threads may share the backend
  std::unique_ptr<Api> api_;
  std::map<uintptr_t, Range> ranges_;
  std::vector<unsigned long long> free_;
  uint64_t mapped_ = 0;
  uint64_t parked_limit_ = 0;
  uint64_t parked_count_ = 0;
  // Parked granules oldest first as (range base, granule index); an entry whose granule has
  // since been committed again (or unmapped) is stale and skipped.
  std::deque<std::pair<uintptr_t, uint64_t>> parked_order_;
  // Mapping ahead: reservations waiting for it (by base; one gone or remade since is checked
  // under mu_), the thread, and its wake-ups.
  std::deque<uintptr_t> ahead_queue_;
  std::condition_variable ahead_cv_;
  bool ahead_stop_ = false;
  bool ahead_busy_ = false;
  std::thread ahead_thread_;
};

}  // namespace hearth::cuda_impl
