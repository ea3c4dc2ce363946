#include "process-memory.h"

#include <cerrno>
#include <cstring>

#if defined(__linux__)
#include <sys/prctl.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hearth {

std::string limit_huge_pages_to_advised_regions() {
#if defined(__linux__) && defined(PR_SET_THP_DISABLE)
  constexpr unsigned long kExceptAdvised = 1ul << 1;  // PR_THP_DISABLE_EXCEPT_ADVISED
  if (prctl(PR_SET_THP_DISABLE, 1ul, kExceptAdvised, 0ul, 0ul) == 0)
    return "transparent huge pages: advised regions only";
  return std::string("transparent huge pages: system policy (") + std::strerror(errno) + ")";
#else
  return "transparent huge pages: system policy";
#endif
}

void bound_allocator_retention(int max_arenas) {
#if defined(__GLIBC__)
  // Setting the threshold explicitly also switches off glibc's dynamic raising of it.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
  if (max_arenas > 0) mallopt(M_ARENA_MAX, max_arenas);
#else
  (void)max_arenas;
#endif
}

void release_free_heap_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace hearth
