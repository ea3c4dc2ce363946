// mmap-backed MappedFile and small-file helpers.
#include "base/mapped-file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

namespace hearth {

namespace {

constexpr uint64_t kHugePage = 2u << 20;

// Maps a whole file read-only. Files of a huge page or more go at a 2 MiB-aligned address with
// MADV_HUGEPAGE: the page cache then fills them with 2 MiB folios on faults (and a file just
// written through write() already has them), which the kernel maps with one PMD entry each.
// Decode streams every weight once per token, and with 4 KiB mappings the L2 streamer stops
// at every page edge and each page costs a TLB walk: a 2-thread read measured ~10% faster
// through 2 MiB mappings. Both steps are hints: where they fail the plain mapping stands.
void* map_huge_aligned(int fd, uint64_t size) {
  if (size < kHugePage) return mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  // Reserve size + 2 MiB of address space, place the file at the first aligned address inside
  // it, and give back the slack on both sides.
  void* r = mmap(nullptr, size + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) return mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  auto* base = static_cast<uint8_t*>(r);
  auto* aligned = reinterpret_cast<uint8_t*>((uintptr_t(base) + kHugePage - 1) & ~(kHugePage - 1));
  void* p = mmap(aligned, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    munmap(base, size + kHugePage);
    return mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  if (aligned > base) munmap(base, size_t(aligned - base));
  // The file's mapping ends at a page boundary; the reservation's slack after it goes back.
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  uint8_t* end = aligned + (size + page - 1) / page * page;
  if (base + size + kHugePage > end) munmap(end, size_t(base + size + kHugePage - end));
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);
#endif
  return p;
}

// The live mappings (start -> size), for release_pages: only their pages may be dropped.
struct LiveMappings {
  std::mutex mu;
  std::map<uintptr_t, uint64_t> spans;
};
LiveMappings& live_mappings() {
  static LiveMappings* m = new LiveMappings;  // (never destroyed: files may outlive statics)
  return *m;
}

void unmap(const uint8_t* data, uint64_t size) {
  {
    LiveMappings& m = live_mappings();
    std::lock_guard<std::mutex> lock(m.mu);
    m.spans.erase(uintptr_t(data));
  }
  munmap(const_cast<uint8_t*>(data), size);
}

}  // namespace

void MappedFile::release_pages(const void* p, uint64_t bytes) {
  if (!p || bytes == 0) return;
  const uintptr_t begin = uintptr_t(p);
  if (begin + bytes < begin) return;
  LiveMappings& m = live_mappings();
  std::lock_guard<std::mutex> lock(m.mu);  // (the mapping stays while its pages are dropped)
  auto it = m.spans.upper_bound(begin);
  if (it == m.spans.begin()) return;
  --it;
  if (begin + bytes > it->first + it->second) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + bytes) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), size_t(last - first), MADV_DONTNEED);
}

MappedFile::MappedFile(MappedFile&& o) noexcept {
  *this = std::move(o);
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) unmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    identity_ = std::move(o.identity_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) unmap(data_, size_);
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error(path + ": not a regular file");
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = uint64_t(st.st_size);
  f.identity_ = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                std::to_string(st.st_mtim.tv_nsec);
  if (f.size_ > 0) {
    void* p = map_huge_aligned(fd, f.size_);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return Status::error(path + ": mmap failed: " + std::strerror(e));
    }
    f.data_ = static_cast<const uint8_t*>(p);
    LiveMappings& m = live_mappings();
    std::lock_guard<std::mutex> lock(m.mu);
    m.spans[uintptr_t(p)] = f.size_;
  }
  ::close(fd);
  return f;
}

void MappedFile::advise_willneed() const {
  if (data_) madvise(const_cast<uint8_t*>(data_), size_, MADV_WILLNEED);
}

Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes) {
  HEARTH_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open(path));
  if (f.size() > max_bytes)
    return Status::error(path + ": file is " + std::to_string(f.size()) + " bytes, limit " +
                         std::to_string(max_bytes));
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace hearth
