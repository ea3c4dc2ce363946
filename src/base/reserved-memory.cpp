// mmap(PROT_NONE, MAP_NORESERVE) reservations; mprotect commits; madvise(MADV_DONTNEED) then
// PROT_NONE decommits (the pages go back to the kernel and a stray access faults instead of
// silently reading zeros).
#include "base/reserved-memory.h"

#include <sys/mman.h>
#include <unistd.h>

namespace hearth {

uint64_t host_page_size() {
  static const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  return page;
}

namespace {

uint64_t whole_pages(uint64_t bytes) {
  const uint64_t page = host_page_size();
  return (bytes + page - 1) / page * page;
}

}  // namespace

void* reserve_host_range(uint64_t bytes) {
  void* p = mmap(nullptr, whole_pages(bytes ? bytes : 1), PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

bool commit_host_range(void* base, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return true;
  return mprotect(static_cast<char*>(base) + offset, bytes, PROT_READ | PROT_WRITE) == 0;
}

void decommit_host_range(void* base, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  char* p = static_cast<char*>(base) + offset;
  madvise(p, bytes, MADV_DONTNEED);
  mprotect(p, bytes, PROT_NONE);
}

void release_host_range(void* base, uint64_t bytes) {
  if (base) munmap(base, whole_pages(bytes ? bytes : 1));
}

}  // namespace hearth
