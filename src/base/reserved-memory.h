// Host address space reserved without memory behind it, and pages committed into it on demand
// (the CPU backend's KV cache paging, backend/backend.h reserve_kv): a reservation costs no RSS
// and no swap; commit makes pages usable, decommit returns them to the kernel at once.
#pragma once

#include <cstdint>

namespace hearth {

uint64_t host_page_size();
// nullptr when the address space cannot be reserved. `bytes` is rounded up to whole pages.
void* reserve_host_range(uint64_t bytes);
// Offsets and sizes are multiples of host_page_size(). commit returns false when the kernel
// refuses (the range stays inaccessible).
bool commit_host_range(void* base, uint64_t offset, uint64_t bytes);
void decommit_host_range(void* base, uint64_t offset, uint64_t bytes);
void release_host_range(void* base, uint64_t bytes);

}  // namespace hearth
