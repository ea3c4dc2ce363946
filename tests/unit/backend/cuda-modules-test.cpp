// Every CUDA source with kernels registers its module for preloading (kernels/cuda/
// kernel-modules.cuh): a .cu file without HEARTH_CUDA_MODULE() would have its kernels load at
// their first launch in a server, stalling that step. A source check, so it runs without a GPU
// (and in builds without CUDA).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test-data.h"

namespace hearth::test {
namespace {

TEST(CudaModules, EveryKernelSourceRegistersItsModule) {
  const std::filesystem::path dir = std::filesystem::path(source_dir()) / "src/kernels/cuda";
  int with_kernels = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".cu") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    if (s.find("__global__") == std::string::npos) continue;
    ++with_kernels;
    EXPECT_NE(s.find("\nHEARTH_CUDA_MODULE()"), std::string::npos)
        << entry.path().filename() << " has kernels but does not end with HEARTH_CUDA_MODULE()";
  }
  EXPECT_GE(with_kernels, 20) << "the kernel sources were not found under " << dir;
}

}  // namespace
}  // namespace hearth::test
