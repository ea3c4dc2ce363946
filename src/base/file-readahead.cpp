// FileReadahead (file-readahead.h): MADV_WILLNEED over a mapped file, one step at a time.
#include "base/file-readahead.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace hearth {

FileReadahead::FileReadahead(const MappedFile& file, uint64_t step) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (!file.data() || pages <= 0 || page <= 0 || file.size() > uint64_t(pages) * uint64_t(page) / 2)
    return;
  step = std::max<uint64_t>(step, uint64_t(page)) / uint64_t(page) * uint64_t(page);
  thread_ = std::thread([this, base = file.data(), size = file.size(), step] {
    // WILLNEED on a file mapping starts the reads and returns; pages already cached are
    // skipped, so on a warm file the whole walk costs a few milliseconds of this thread.
    // Steps keep each call short, so stop_ is seen soon.
    for (uint64_t off = 0; off < size && !stop_.load(std::memory_order_relaxed); off += step)
      madvise(const_cast<uint8_t*>(base) + off, size_t(std::min(step, size - off)), MADV_WILLNEED);
  });
}

FileReadahead::~FileReadahead() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace hearth
