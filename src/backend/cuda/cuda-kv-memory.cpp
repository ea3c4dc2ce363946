// CudaKvMemory: the driver entry points, granule mapping and the free list of physical handles.
#include "backend/cuda/cuda-kv-memory.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <set>

#include "kernels/cuda/driver-entry.h"

namespace hearth::cuda_impl {

struct CudaKvMemory::Api {
  PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};  // read-write from the device, for every mapped granule
};

namespace {

// 12000: the ABI of these calls has not changed since CUDA 10.2 (the _v10020 typedefs).
template <typename Fn>
bool entry_point(const char* symbol, Fn* fn) {
  return cuda::driver_entry_point(symbol, 12000, fn);
}

}  // namespace

CudaKvMemory::CudaKvMemory(int device, uint64_t parked_limit, bool map_ahead)
    : device_(device), api_(std::make_unique<Api>()), parked_limit_(parked_limit) {
  Api& a = *api_;
  const bool found =
      entry_point("cuMemAddressReserve", &a.address_reserve) &&
      entry_point("cuMemAddressFree", &a.address_free) && entry_point("cuMemCreate", &a.create) &&
      entry_point("cuMemRelease", &a.release) && entry_point("cuMemMap", &a.map) &&
      entry_point("cuMemUnmap", &a.unmap) && entry_point("cuMemSetAccess", &a.set_access) &&
      entry_point("cuMemGetAllocationGranularity", &a.granularity);
  if (!found) return;
  a.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  a.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.prop.location.id = device;
  a.access.location = a.prop.location;
  a.access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t g = 0;
  if (a.granularity(&g, &a.prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS)
    granularity_ = g;
  if (parked_limit_ == 0) {
    size_t free_bytes = 0, total_bytes = 0;
    cudaSetDevice(device_);
    // An eighth: a server's first requests find their first blocks mapped ahead (a 7B's
    // 128 caches of `--parallel 64` hold 16 GiB of them); parked memory is what a commit that
    // finds the device full takes first, so the limit bounds a reserve, not a loss.
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) parked_limit_ = total_bytes / 8;
  }
  if (map_ahead && available()) ahead_thread_ = std::thread([this] { map_ahead_loop(); });
}

CudaKvMemory::~CudaKvMemory() {
  if (ahead_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ahead_stop_ = true;
    }
    ahead_cv_.notify_all();
    ahead_thread_.join();
  }
  if (!available()) return;
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  while (!ranges_.empty()) unreserve(reinterpret_cast<void*>(ranges_.begin()->first));
  for (unsigned long long h : free_) api_->release(CUmemGenericAllocationHandle(h));
}

void* CudaKvMemory::reserve(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t size = (bytes + granularity_ - 1) / granularity_ * granularity_;
  CUdeviceptr p = 0;
  if (api_->address_reserve(&p, size, granularity_, 0, 0) != CUDA_SUCCESS) return nullptr;
  Range& r = ranges_[uintptr_t(p)];
  r.bytes = size;
  r.handles.assign(size_t(size / granularity_), 0);
  r.parked.assign(size_t(size / granularity_), 0);
  if (ahead_thread_.joinable()) {
    ahead_queue_.push_back(uintptr_t(p));
    ahead_cv_.notify_all();
  }
  return reinterpret_cast<void*>(p);
}

void CudaKvMemory::map_ahead_loop() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ahead_cv_.wait(lock, [&] { return ahead_stop_ || !ahead_queue_.empty(); });
    if (ahead_stop_) return;
    const uintptr_t base = ahead_queue_.front();
    ahead_queue_.pop_front();
    ahead_busy_ = true;
    if (!map_ahead_one(lock, base)) ahead_queue_.clear();  // no room: the rest map on use
    ahead_busy_ = false;
    ahead_cv_.notify_all();
    // A commit waiting on the lock goes first: at most one granule's calls stand before it.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
}

bool CudaKvMemory::first_mapped_or_gone(uintptr_t base) const {
  auto it = ranges_.find(base);
  return it == ranges_.end() || it->second.handles.empty() || it->second.handles[0] != 0;
}

bool CudaKvMemory::map_ahead_one(std::unique_lock<std::mutex>& lock, uintptr_t base) {
  if (first_mapped_or_gone(base)) return true;
  if ((parked_count_ + 1) * granularity_ > parked_limit_) return false;
  unsigned long long h = 0;
  if (!free_.empty()) {
    h = free_.back();
    free_.pop_back();
  } else {
    // cuMemCreate outside the lock: commits go on meanwhile. Never a parked granule's handle:
    // mapping ahead only uses memory the device has free.
    lock.unlock();
    CUmemGenericAllocationHandle created = 0;
    const bool ok = api_->create(&created, granularity_, &api_->prop, 0) == CUDA_SUCCESS;
    lock.lock();
    if (!ok) return false;
    h = created;
    if (first_mapped_or_gone(base)) return free_.push_back(h), true;
  }
  if (api_->map(CUdeviceptr(base), granularity_, 0, CUmemGenericAllocationHandle(h), 0) !=
      CUDA_SUCCESS)
    return free_.push_back(h), false;
  if (api_->set_access(CUdeviceptr(base), granularity_, &api_->access, 1) != CUDA_SUCCESS) {
    api_->unmap(CUdeviceptr(base), granularity_);
    return free_.push_back(h), false;
  }
  Range& r = ranges_[base];
  r.handles[0] = h;
  ++mapped_;
  park(r, base, 0);
  return true;
}

void CudaKvMemory::map_ahead(void* base) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ahead_thread_.joinable() || first_mapped_or_gone(uintptr_t(base))) return;
  ahead_queue_.push_back(uintptr_t(base));
  ahead_cv_.notify_all();
}

void CudaKvMemory::wait_mapped_ahead() {
  std::unique_lock<std::mutex> lock(mu_);
  ahead_cv_.wait(lock, [&] { return ahead_queue_.empty() && !ahead_busy_; });
}

bool CudaKvMemory::commit(void* base, uint64_t offset, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.find(uintptr_t(base));
  if (it == ranges_.end() || offset + bytes > it->second.bytes) return false;
  Range& r = it->second;
  cudaSetDevice(device_);
  const uint64_t first = offset / granularity_, count = bytes / granularity_;
  // Granules still mapped (parked) come back as they are; the others are mapped, and access is
  // set once per run of newly mapped granules (the slowest call).
  uint64_t run_begin = 0, run_length = 0;
  auto grant_run = [&] {
    if (run_length == 0) return true;
    const CUdeviceptr p = CUdeviceptr(uintptr_t(base) + run_begin * granularity_);
    const bool ok =
        api_->set_access(p, run_length * granularity_, &api_->access, 1) == CUDA_SUCCESS;
    run_length = 0;
    return ok;
  };
  for (uint64_t i = first; i < first + count; ++i) {
    if (r.handles[i]) {
      if (r.parked[i]) r.parked[i] = 0, --parked_count_;
      if (!grant_run()) return unmap(r, uintptr_t(base), first, count), false;
      continue;
    }
    const unsigned long long h = take_handle();
    if (!h || api_->map(CUdeviceptr(uintptr_t(base) + i * granularity_), granularity_, 0,
                        CUmemGenericAllocationHandle(h), 0) != CUDA_SUCCESS) {
      if (h) free_.push_back(h);
      unmap(r, uintptr_t(base), first, i - first);
      return false;
    }
    r.handles[i] = h;
    ++mapped_;
    if (run_length == 0) run_begin = i;
    ++run_length;
  }
  if (!grant_run()) return unmap(r, uintptr_t(base), first, count), false;
  return true;
}

unsigned long long CudaKvMemory::take_handle() {
  while (true) {
    if (!free_.empty()) {
      const unsigned long long h = free_.back();
      free_.pop_back();
      return h;
    }
    CUmemGenericAllocationHandle h = 0;
    if (api_->create(&h, granularity_, &api_->prop, 0) == CUDA_SUCCESS) return h;
    // Out of device memory: what parked granules hold is the reserve (an unmapped one's
    // handle goes to the free list, or back to the device, and then create is tried again).
    if (!unmap_oldest_parked()) return 0;
  }
}

void CudaKvMemory::park(Range& r, uintptr_t base, uint64_t i) {
  r.parked[i] = 1;
  ++parked_count_;
  parked_order_.emplace_back(base, i);
}

bool CudaKvMemory::unmap_oldest_parked() {
  while (!parked_order_.empty()) {
    const auto [base, i] = parked_order_.front();
    parked_order_.pop_front();
    auto it = ranges_.find(base);
    if (it == ranges_.end() || i >= it->second.parked.size() || !it->second.parked[i]) continue;
    cudaDeviceSynchronize();  // work queued before the decommit may still use the rows
    unmap(it->second, base, i, 1);
    return true;
  }
  return false;
}

void CudaKvMemory::trim_parked() {
  while (parked_count_ * granularity_ > parked_limit_ && unmap_oldest_parked()) {
  }
}

void CudaKvMemory::unmap(Range& r, uintptr_t base, uint64_t first, uint64_t count) {
  for (uint64_t i = first; i < first + count && i < r.handles.size(); ++i) {
    if (!r.handles[i]) continue;
    if (r.parked[i]) r.parked[i] = 0, --parked_count_;
    api_->unmap(CUdeviceptr(base + i * granularity_), granularity_);
    if (free_.size() * granularity_ < kFreeListBytes)
      free_.push_back(r.handles[i]);
    else
      api_->release(CUmemGenericAllocationHandle(r.handles[i]));
    r.handles[i] = 0;
    --mapped_;
  }
}

void CudaKvMemory::decommit(void* base, uint64_t offset, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.find(uintptr_t(base));
  if (it == ranges_.end()) return;
  Range& r = it->second;
  cudaSetDevice(device_);
  const uint64_t first = offset / granularity_;
  for (uint64_t i = first; i < first + bytes / granularity_ && i < r.handles.size(); ++i) {
    if (!r.handles[i] || r.parked[i]) continue;
    park(r, uintptr_t(base), i);
  }
  trim_parked();
  // Granules committed again leave their entries behind: drop those (and older duplicates of a
  // granule parked twice) before the list outgrows what is parked.
  if (parked_order_.size() > 2 * parked_count_ + 4096) {
    std::set<std::pair<uintptr_t, uint64_t>> seen;
    std::deque<std::pair<uintptr_t, uint64_t>> kept;
    for (auto e = parked_order_.rbegin(); e != parked_order_.rend(); ++e) {
      auto r = ranges_.find(e->first);
      if (r != ranges_.end() && r->second.parked[e->second] && seen.insert(*e).second)
        kept.push_front(*e);
    }
    parked_order_.swap(kept);
  }
}

void CudaKvMemory::unreserve(void* base) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.find(uintptr_t(base));
  if (it == ranges_.end()) return;
  cudaSetDevice(device_);
  unmap(it->second, uintptr_t(base), 0, it->second.handles.size());
  api_->address_free(CUdeviceptr(uintptr_t(base)), it->second.bytes);
  ranges_.erase(it);
}

}  // namespace hearth::cuda_impl
