// make_gpu_backend: dispatches to the CUDA backend when the build has it.
#include "backend/gpu-backend.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda-backend.h"
#endif

namespace hearth {

bool gpu_backend_compiled() {
#ifdef HEARTH_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<Backend>> make_gpu_backend(int device, const CudaOptions& cuda) {
#ifdef HEARTH_HAVE_CUDA
  Status error;
  auto backend = make_cuda_backend(device, cuda, &error);
  if (!backend) return error.is_ok() ? Status::error("no CUDA device") : error;
  return backend;
#else
  (void)device, (void)cuda;
  return Status::error("this build of hearth has no GPU support (configure with -DHEARTH_CUDA=ON)");
#endif
}

}  // namespace hearth
