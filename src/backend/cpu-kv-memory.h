// The CPU backend's paged KV memory (Backend::reserve_kv .. unreserve on host pages), with the
// pages of a decommit parked: left committed and resident, up to a byte limit, so the next
// sequence that grows into the same rows does not fault them in again.
// Why: a server slot gives back its cache when a request ends and the next request's first
// touches fault every page in again (MADV_DONTNEED then zeroed pages): kjv-13m with 8 clients
// spent ~11% of its samples in those faults (the f16 K/V stores that touch fresh pages, and the
// kernel behind them). Parked pages go back to the kernel when the server goes idle
// (release_parked), oldest first when the limit is reached, and with their reservation.
// A KV buffer is committed as a prefix that grows and shrinks at its end (kv/kv-cache.h), so
// each reservation holds at most one parked extent: the pages just past its committed prefix.
// Thread-safe: sessions on several threads share one backend.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace hearth {

class CpuKvMemory {
 public:
  // parked_limit: bytes of decommitted pages kept resident (0: none, every decommit returns its
  // pages at once as before).
  explicit CpuKvMemory(uint64_t parked_limit) : limit_(parked_limit) {}
  ~CpuKvMemory() { release_parked(); }
  CpuKvMemory(const CpuKvMemory&) = delete;
  CpuKvMemory& operator=(const CpuKvMemory&) = delete;

  // The default limit: 1/64 of the host's physical memory, at most 1 GiB.
  static uint64_t default_parked_limit();

  void* reserve(uint64_t bytes);  // nullptr when the address space cannot be had
  bool commit(void* base, uint64_t offset, uint64_t bytes);
  void decommit(void* base, uint64_t offset, uint64_t bytes);
  void unreserve(void* base, uint64_t bytes);
  // Every parked page back to the kernel.
  void release_parked();
  uint64_t parked_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return parked_;
  }

 private:
  struct Extent {
    uint64_t lo = 0, hi = 0;  // parked bytes [lo, hi) of the range (committed, not in use)
    uint64_t age = 0;         // when it was last parked into: the oldest goes first
  };
  void release_locked(std::map<uintptr_t, Extent>::iterator it);
  const uint64_t limit_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Extent> parked_extents_;  // by reservation base
  uint64_t parked_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace hearth
