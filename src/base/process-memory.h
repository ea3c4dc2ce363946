// Process-wide memory policy for the hearth executable (never called by the library: an
// embedding application owns its process's settings).
//
// Why: on hosts whose transparent huge pages are set to "always", every first touch of a
// malloc arena, a thread stack or a request buffer faults in a whole 2 MiB page, and
// khugepaged later collapses sparsely used ranges into more of them. A server then reports
// hundreds of MiB it never used (seen in CI: a kjv-13m server at 114-198 MiB before any load,
// growing by 190-260 MiB under hostile traffic, against 46-60 MiB and a few MiB of growth on
// a "madvise" host). The engine already advises the regions that gain from 2 MiB pages
// (weights, the weight cache, the KV cache and other large backend buffers), so the process
// asks the kernel to treat everything else as a "madvise" host would.
#pragma once

#include <string>

namespace hearth {

// Huge pages only where the engine advises them (PR_THP_DISABLE_EXCEPT_ADVISED, Linux 6.18+).
// Returns what was done, for the log; on older kernels nothing changes.
std::string limit_huge_pages_to_advised_regions();

// For long-running servers: blocks of 128 KiB and more (request bodies, response buffers)
// are mapped on their own and unmapped when freed, instead of glibc raising its mmap
// threshold after the first such free and keeping them in per-thread arenas; and the number
// of arenas is bounded, since each keeps its own free memory.
void bound_allocator_retention(int max_arenas);

// Gives back to the kernel the free memory the allocator holds (between bursts of work).
void release_free_heap_memory();

}  // namespace hearth
