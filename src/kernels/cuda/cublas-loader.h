// cuBLAS and cuBLASLt opened with dlopen at their first use, not by the dynamic loader at exec:
// cublas-loader.cpp defines the cublas* functions Hearth calls as forwarders into them.
// A new cuBLAS function: add it to the list in cublas-loader.cpp with its forwarder.
#pragma once

#include <string>

namespace hearth::cuda {

// Opens both libraries and looks up every function once per process (a second caller waits for
// the first). Returns "" when they are usable, else one line saying why not. The forwarders
// call it themselves; calling it ahead (on a thread) only moves the cost off the first GEMM.
const std::string& cublas_load();

}  // namespace hearth::cuda
