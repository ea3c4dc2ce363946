// Every .cu file with kernels is its own CUDA module, and the runtime loads a kernel's code onto
// the device only when the kernel is first launched (lazy loading, CUDA's default); that launch
// waits for the load. A fresh server's first steps paid it (H200, 7B: mixed steps of 36-65 ms
// against ~22 later; CUDA_MODULE_LOADING=EAGER removes it but also loads all of cuBLAS at
// start). HEARTH_CUDA_MODULE() records one kernel of the file's module, so that
// preload_kernel_modules() (cuda-ops.h) can load every kernel of every module ahead of need
// (~400 kernels in ~90 ms). Use it once per .cu file, at namespace scope.
#pragma once

#include "kernels/cuda/cuda-ops.h"

#define HEARTH_CUDA_MODULE()                                                                     \
  namespace {                                                                                    \
  __global__ void module_anchor_kernel() {}                                                      \
  [[maybe_unused]] const bool module_anchor_registered = ::hearth::cuda::register_kernel_module( \
      reinterpret_cast<const void*>(&module_anchor_kernel));                                     \
  }
