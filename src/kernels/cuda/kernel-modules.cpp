// The kernel modules' registry and their loading ahead of need (kernel-modules.cuh says why).
// Driver calls come from cudaGetDriverEntryPointByVersion: the kernels library links cudart only.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <set>
#include <vector>

#include "kernels/cuda/cuda-ops.h"
#include "kernels/cuda/driver-entry.h"

namespace hearth::cuda {

namespace {

// (function-local: registrations run as static initializers, in no set order)
std::vector<const void*>& anchors() {
  static std::vector<const void*> v;
  return v;
}
std::mutex& anchors_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

bool register_kernel_module(const void* anchor_kernel) {
  std::lock_guard<std::mutex> lock(anchors_mutex());
  anchors().push_back(anchor_kernel);
  return true;
}

cudaError_t preload_kernel_modules(KernelPreload* out) {
  KernelPreload r;
  PFN_cuFuncGetModule_v11000 func_module = nullptr;
  PFN_cuModuleGetFunctionCount_v12040 function_count = nullptr;
  PFN_cuModuleEnumerateFunctions_v12040 enumerate = nullptr;
  PFN_cuFuncIsLoaded_v12040 is_loaded = nullptr;
  PFN_cuFuncLoad_v12040 load = nullptr;
  // 12040: cuModuleEnumerateFunctions, cuFuncIsLoaded and cuFuncLoad came with CUDA 12.4.
  constexpr int v = 12040;
  if (!driver_entry_point("cuFuncGetModule", v, &func_module) ||
      !driver_entry_point("cuModuleGetFunctionCount", v, &function_count) ||
      !driver_entry_point("cuModuleEnumerateFunctions", v, &enumerate) ||
      !driver_entry_point("cuFuncIsLoaded", v, &is_loaded) ||
      !driver_entry_point("cuFuncLoad", v, &load))
    return cudaErrorNotSupported;  // a driver before 12.4: kernels load on first launch
  std::vector<const void*> list;
  {
    std::lock_guard<std::mutex> lock(anchors_mutex());
    list = anchors();
  }
  std::set<CUmodule> seen;
  for (const void* anchor : list) {
    cudaFunction_t f = nullptr;
    CUmodule mod = nullptr;
    if (cudaGetFuncBySymbol(&f, anchor) != cudaSuccess) return cudaGetLastError();
    if (func_module(&mod, reinterpret_cast<CUfunction>(f)) != CUDA_SUCCESS)
      return cudaErrorInvalidDeviceFunction;
    if (!seen.insert(mod).second) continue;
    unsigned n = 0;
    if (function_count(&n, mod) != CUDA_SUCCESS) return cudaErrorInvalidResourceHandle;
    std::vector<CUfunction> fns(n);
    if (n > 0 && enumerate(fns.data(), n, mod) != CUDA_SUCCESS)
      return cudaErrorInvalidResourceHandle;
    ++r.modules;
    r.functions += int(n);
    for (CUfunction fn : fns) {
      CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_MAX;
      if (is_loaded(&state, fn) == CUDA_SUCCESS && state == CU_FUNCTION_LOADING_STATE_LOADED)
        continue;
      if (load(fn) != CUDA_SUCCESS) return cudaErrorLaunchFailure;
      ++r.loaded;
    }
  }
  if (out) *out = r;
  return cudaSuccess;
}

}  // namespace hearth::cuda
