// apps/bench/nvml-probe: without NVML (CI, this build machine) the probe reports "n/a" with its
// reason and returns no readings, never crashing; with NVML it names the GPU.
#include <gtest/gtest.h>

#include "nvml-probe.h"

namespace hearth::bench {
namespace {

TEST(NvmlProbe, MissingLibraryIsNotAvailableWithReason) {
  NvmlProbe p("libhearth-no-such-nvml.so.1");
  EXPECT_FALSE(p.available());
  EXPECT_NE(p.why_unavailable().find("libhearth-no-such-nvml.so.1"), std::string::npos)
      << p.why_unavailable();
  EXPECT_NE(p.why_unavailable().find("not found"), std::string::npos) << p.why_unavailable();
  EXPECT_FALSE(p.energy_j().has_value());
  EXPECT_FALSE(p.power_w().has_value());
  EXPECT_EQ(p.summary(), "n/a (" + p.why_unavailable() + ")");
}

TEST(NvmlProbe, EmptyLibraryNameIsNotAvailable) {
  NvmlProbe p("");
  EXPECT_FALSE(p.available());
  EXPECT_FALSE(p.why_unavailable().empty());
  EXPECT_FALSE(p.energy_j().has_value());
  EXPECT_EQ(p.summary().rfind("n/a (", 0), 0u) << p.summary();
}

// A library that loads but is not NVML (libc): refused by its missing entry points.
TEST(NvmlProbe, LibraryWithoutNvmlSymbolsIsNotAvailable) {
  NvmlProbe p("libc.so.6");
  EXPECT_FALSE(p.available());
  EXPECT_NE(p.why_unavailable().find("lacks nvmlInit_v2"), std::string::npos)
      << p.why_unavailable();
  EXPECT_FALSE(p.energy_j().has_value());
  EXPECT_FALSE(p.power_w().has_value());
}

// The process-wide probe: on a machine without the NVIDIA driver it says n/a and why; where
// NVML is present it names a device and has no reason. Either way readings never crash.
TEST(NvmlProbe, InstanceIsConsistent) {
  const NvmlProbe& p = NvmlProbe::instance();
  EXPECT_EQ(&p, &NvmlProbe::instance());
  if (p.available()) {
    EXPECT_FALSE(p.name().empty());
    EXPECT_TRUE(p.why_unavailable().empty());
    EXPECT_EQ(p.summary(), p.name());
  } else {
    EXPECT_FALSE(p.why_unavailable().empty());
    EXPECT_EQ(p.summary(), "n/a (" + p.why_unavailable() + ")");
    EXPECT_FALSE(p.energy_j().has_value());
    EXPECT_FALSE(p.power_w().has_value());
  }
}

}  // namespace
}  // namespace hearth::bench
