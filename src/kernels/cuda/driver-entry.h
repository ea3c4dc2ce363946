// A CUDA driver function by name, through the runtime (cudaGetDriverEntryPointByVersion), so
// Hearth's libraries link cudart only, never libcuda. `version`: the CUDA version whose ABI of
// the function the caller's PFN_ typedef describes (e.g. 12000, 12040).
#pragma once

#include <cuda_runtime_api.h>

namespace hearth::cuda {

template <typename Fn>
bool driver_entry_point(const char* symbol, int version, Fn* fn) {
  cudaDriverEntryPointQueryResult found{};
  void* p = nullptr;
  if (cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !p)
    return false;
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

}  // namespace hearth::cuda
