// The CUDA backend: activations, KV cache and weights in device memory; every Backend op runs
// as CUDA kernels (src/kernels/cuda) on one stream, with decode steps replayed as CUDA graphs.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda-options.h"
#include "base/status.h"

namespace hearth {

// A backend on CUDA device `device` that works as `options` say. Without a usable GPU (no
// driver, no device, bad index) or with options out of range it returns nullptr and sets *error
// to one line saying why; it never aborts.
std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options, Status* error);

}  // namespace hearth
