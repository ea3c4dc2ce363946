// The GPU backend factory, whatever the build: with CUDA compiled in it returns a CUDA backend
// (or why none could start); without, a one-line reason. Callers then fall back to the CPU.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda-options.h"

namespace hearth {

// cuda: how a CUDA backend works (ignored by a build without one).
Result<std::unique_ptr<Backend>> make_gpu_backend(int device, const CudaOptions& cuda = {});
bool gpu_backend_compiled();

}  // namespace hearth
