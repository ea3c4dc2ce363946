// Layer placement (backend/placement.h): --gpu-layers counts, all and auto against what the GPU
// backend can run and what fits its free memory. The device side (cudaMemGetInfo, per-weight
// bytes) runs in the CUDA op tests.
#include <gtest/gtest.h>

#include <cstdint>

#include "backend/backend.h"
#include "backend/placement.h"

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

GpuLayerCosts h200_7b() {
  GpuLayerCosts c;
  c.free_bytes = 12 * kGiB;
  c.fixed_bytes = 5 * kGiB / 2;
  c.per_layer_bytes = 6 * kGiB / 10;
  c.ctx = 4096;
  return c;
}

TEST(CpuMoe, NoneFirstNOrEveryLayer) {
  for (int64_t l : {0, 1, 47}) EXPECT_FALSE(experts_on_cpu(0, l)) << l;  // default: none
  EXPECT_TRUE(experts_on_cpu(kCpuMoeAll, 0));                            // --cpu-moe
  EXPECT_TRUE(experts_on_cpu(kCpuMoeAll, 47));
  EXPECT_TRUE(experts_on_cpu(10, 0));  // --n-cpu-moe 10: layers 0..9
  EXPECT_TRUE(experts_on_cpu(10, 9));
  EXPECT_FALSE(experts_on_cpu(10, 10));
  EXPECT_FALSE(experts_on_cpu(10, 47));
}

TEST(PlaceLayers, MixtureOfExpertsStaysOnTheCpuWithAOneLineReason) {
  // A GPU backend without the MoE FFN: every layer on the CPU, and the reason names it.
  const GpuCandidate gpu{"cuda", Backend::kQkNorm | Backend::kScaleOps};
  const LayerPlacement p = place_layers(kGpuLayersAll, 4, Backend::kMoe, &gpu, "", nullptr);
  EXPECT_EQ(p.gpu_layers, 0);
  EXPECT_EQ(p.gpu_refused, "cuda does not run this model's mixture-of-experts FFN yet");
}

TEST(PlaceLayers, CountsAllAndAutoWithAnAbleGpu) {
  const GpuCandidate gpu{"cuda", Backend::kQkNorm | Backend::kScaleOps};
  const auto no_costs = []() -> GpuLayerCosts {
    ADD_FAILURE() << "costs asked for";
    return {};
  };
  EXPECT_EQ(place_layers(0, 32, 0, &gpu, "", no_costs).gpu_layers, 0);
  EXPECT_EQ(place_layers(10, 32, Backend::kQkNorm, &gpu, "", no_costs).gpu_layers, 10);
  EXPECT_EQ(place_layers(99, 32, 0, &gpu, "", no_costs).gpu_layers, 32);  // more than there are
  EXPECT_EQ(place_layers(kGpuLayersAll, 32, 0, &gpu, "", no_costs).gpu_layers, 32);
  const LayerPlacement a = place_layers(kGpuLayersAuto, 32, 0, &gpu, "", h200_7b);
  EXPECT_EQ(a.gpu_layers, 15);  // (12 - 2.5) / 0.6 = 15.8
  EXPECT_TRUE(a.gpu_refused.empty());
  EXPECT_NE(a.auto_note.find("15 of 32 layers"), std::string::npos) << a.auto_note;
  // A backend that does not budget its memory takes every layer.
  const LayerPlacement unbudgeted =
      place_layers(kGpuLayersAuto, 32, 0, &gpu, "", [] { return GpuLayerCosts{}; });
  EXPECT_EQ(unbudgeted.gpu_layers, 32);
  EXPECT_TRUE(unbudgeted.auto_note.empty());
}

TEST(PlaceLayers, AGpuLackingAnOpTheModelNeedsRunsNoLayerAndSaysWhich) {
  const GpuCandidate gpu{"cuda", Backend::kQkNorm};
  const uint32_t needed = Backend::kQkNorm | Backend::kGeluGated | Backend::kMaskedAttention;
  for (int requested : {1, 32, kGpuLayersAll, kGpuLayersAuto}) {
    const LayerPlacement p = place_layers(requested, 32, needed, &gpu, "", h200_7b);
    EXPECT_EQ(p.gpu_layers, 0) << requested;
    EXPECT_NE(p.gpu_refused.find("cuda does not run this model's GELU-gated FFN, masked attention"),
              std::string::npos)
        << p.gpu_refused;
  }
}

TEST(PlaceLayers, NoGpuBackendMeansTheCpuWithTheReason) {
  const LayerPlacement p =
      place_layers(kGpuLayersAll, 32, 0, nullptr, "this build has no CUDA backend", h200_7b);
  EXPECT_EQ(p.gpu_layers, 0);
  EXPECT_EQ(p.gpu_refused, "this build has no CUDA backend");
  // Nothing asked of the GPU: nothing to refuse.
  EXPECT_TRUE(place_layers(0, 32, 0, nullptr, "no GPU", h200_7b).gpu_refused.empty());
  EXPECT_EQ(requested_gpu_layers(kGpuLayersAuto, 0), 0);
  EXPECT_EQ(requested_gpu_layers(7, 4), 4);
}

}  // namespace
}  // namespace hearth
