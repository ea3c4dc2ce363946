// An anonymous buffer on 2 MiB pages, as the CPU backend maps its weight cache: for the
// bandwidth probe and the kernel benches, which must stream what the weights stream. Fresh
// memory, advised before anything touches it: a heap block (aligned_alloc) can reuse pages a
// freed buffer already faulted in as 4 KiB ones, which MADV_HUGEPAGE does not convert. Session
// 13 found a third of hearth-decode-sequence-bench's matrices on 4 KiB pages that way (1B Q4_0:
// 24-26 GB/s read, 27-28 once every matrix was on 2 MiB pages).
#pragma once

#include <cstdint>
#include <new>
#include <utility>

#include <sys/mman.h>

namespace hearth {

class HugeBuffer {
 public:
  HugeBuffer() = default;
  explicit HugeBuffer(uint64_t bytes) {
    constexpr uint64_t kHuge = uint64_t(2) << 20;
    mapped_ = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;  // + room to align the start
    raw_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw_ == MAP_FAILED) throw std::bad_alloc();
    data_ =
        reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw_) + kHuge - 1) / kHuge * kHuge);
#ifdef MADV_HUGEPAGE
    madvise(data_, mapped_ - kHuge, MADV_HUGEPAGE);
#endif
  }
  HugeBuffer(HugeBuffer&& o) noexcept {
    *this = std::move(o);
  }
  HugeBuffer& operator=(HugeBuffer&& o) noexcept {
    std::swap(raw_, o.raw_);
    std::swap(mapped_, o.mapped_);
    std::swap(data_, o.data_);
    return *this;
  }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer() {
    if (raw_) munmap(raw_, mapped_);
  }
  uint8_t* get() const {
    return data_;
  }

 private:
  void* raw_ = nullptr;
  uint64_t mapped_ = 0;
  uint8_t* data_ = nullptr;
};

}  // namespace hearth
