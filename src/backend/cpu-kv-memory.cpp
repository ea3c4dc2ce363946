// CpuKvMemory (backend/cpu-kv-memory.h): host KV reservations whose decommitted pages stay
// parked up to a limit. Extending: another policy for parked pages changes decommit's trim.
#include "backend/cpu-kv-memory.h"

#include <unistd.h>

#include <algorithm>

#include "base/reserved-memory.h"

namespace hearth {

uint64_t CpuKvMemory::default_parked_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const uint64_t host = pages > 0 ? uint64_t(pages) * host_page_size() : 0;
  return std::min<uint64_t>(host / 64, uint64_t(1) << 30);
}

void* CpuKvMemory::reserve(uint64_t bytes) {
  return reserve_host_range(bytes);
}

bool CpuKvMemory::commit(void* base, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = parked_extents_.find(uintptr_t(base));
  if (it != parked_extents_.end()) {
    Extent& e = it->second;
    if (e.lo != offset) {  // not the prefix's continuation: start from returned pages
      release_locked(it);
    } else {
      // The parked pages are committed already: take them back, commit what lies beyond.
      const uint64_t take = std::min(bytes, e.hi - e.lo);
      e.lo += take;
      parked_ -= take;
      if (e.lo == e.hi) parked_extents_.erase(it);
      offset += take;
      bytes -= take;
    }
  }
  return commit_host_range(base, offset, bytes);
}

void CpuKvMemory::decommit(void* base, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (limit_ == 0) return decommit_host_range(base, offset, bytes);
  auto it = parked_extents_.find(uintptr_t(base));
  if (it != parked_extents_.end() && it->second.lo != offset + bytes) {
    release_locked(it);  // not adjacent (never for a prefix that shrinks): keep one extent
    it = parked_extents_.end();
  }
  if (it == parked_extents_.end())
    it = parked_extents_.emplace(uintptr_t(base), Extent{offset + bytes, offset + bytes, 0}).first;
  it->second.lo = offset;
  it->second.age = ++clock_;
  parked_ += bytes;
  // Over the limit: the extents parked longest ago go back first (this one last).
  while (parked_ > limit_ && !parked_extents_.empty()) {
    auto oldest =
        std::min_element(parked_extents_.begin(), parked_extents_.end(),
                         [](const auto& a, const auto& b) { return a.second.age < b.second.age; });
    release_locked(oldest);
  }
}

void CpuKvMemory::unreserve(void* base, uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = parked_extents_.find(uintptr_t(base));
    if (it != parked_extents_.end()) {
      parked_ -= it->second.hi - it->second.lo;
      parked_extents_.erase(it);  // munmap below returns its pages
    }
  }
  release_host_range(base, bytes);
}

void CpuKvMemory::release_parked() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!parked_extents_.empty()) release_locked(parked_extents_.begin());
}

void CpuKvMemory::release_locked(std::map<uintptr_t, Extent>::iterator it) {
  const Extent& e = it->second;
  decommit_host_range(reinterpret_cast<void*>(it->first), e.lo, e.hi - e.lo);
  parked_ -= e.hi - e.lo;
  parked_extents_.erase(it);
}

}  // namespace hearth
