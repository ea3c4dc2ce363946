// The CUDA backend: activations, KV cache and weights in device memory; every Backend op runs
// as CUDA kernels (src/kernels/cuda) on one stream, with decode steps replayed as CUDA graphs.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "base/status.h"

namespace hearth {

// A backend on CUDA device `device`. Without a usable GPU (no driver, no device, bad index) it
// returns nullptr and sets *error to one line saying why; it never aborts.
std::unique_ptr<Backend> make_cuda_backend(int device, Status* error);

}  // namespace hearth
