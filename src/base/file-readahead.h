// FileReadahead: a thread that asks the kernel to read a mapped file into the page cache ahead
// of whoever copies out of it, so a cold load keeps the disk's queue deep from its first moment
// (while the GPU context is still being made) instead of faulting the file in 2 MiB at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "base/mapped-file.h"

namespace hearth {

class FileReadahead {
 public:
  // Reads [0, file.size()) ahead in `step`-byte requests; `file` must outlive this object.
  // Does nothing for a file larger than half the machine's memory: read ahead that far, its
  // first pages could be evicted again before they are used.
  explicit FileReadahead(const MappedFile& file, uint64_t step = uint64_t(32) << 20);
  ~FileReadahead();  // stops after the request in flight
  FileReadahead(const FileReadahead&) = delete;
  FileReadahead& operator=(const FileReadahead&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hearth
