// --gpu-layers auto's arithmetic (model.h auto_gpu_layers): how many leading layers fit the
// GPU's free memory next to the fixed part. The device side (cudaMemGetInfo, per-weight bytes)
// runs in the CUDA op tests.
#include <gtest/gtest.h>

#include <cstdint>

#include "model/model.h"

namespace hearth {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

TEST(AutoGpuLayers, CountsWholeLayersThatFitAfterTheFixedPart) {
  // 7B F16-like: 0.6 GiB a layer with its KV, 2.5 GiB fixed.
  const uint64_t layer = 6 * kGiB / 10, fixed = 5 * kGiB / 2;
  EXPECT_EQ(auto_gpu_layers(139 * kGiB, fixed, layer, 32), 32);    // H200: everything
  EXPECT_EQ(auto_gpu_layers(12 * kGiB, fixed, layer, 32), 15);     // (12 - 2.5) / 0.6 = 15.8
  EXPECT_EQ(auto_gpu_layers(fixed + layer, fixed, layer, 32), 1);  // exactly one
  EXPECT_EQ(auto_gpu_layers(fixed + layer - 1, fixed, layer, 32), 0);
}

TEST(AutoGpuLayers, NothingFitsOrNothingToPlace) {
  EXPECT_EQ(auto_gpu_layers(kGiB, 2 * kGiB, kGiB / 10, 32), 0);  // fixed part alone too big
  EXPECT_EQ(auto_gpu_layers(kGiB, kGiB, kGiB / 10, 32), 0);      // nothing left after it
  EXPECT_EQ(auto_gpu_layers(100 * kGiB, kGiB, kGiB, 0), 0);      // no layers
  EXPECT_EQ(auto_gpu_layers(100 * kGiB, kGiB, 0, 24), 24);       // zero-byte layers: all
  // No overflow near the top of the range.
  EXPECT_EQ(auto_gpu_layers(UINT64_MAX, 0, 1, 80), 80);
}

}  // namespace
}  // namespace hearth
