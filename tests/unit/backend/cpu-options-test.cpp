// CpuOptions (backend/cpu-options.h): every cache-verify and decode-lanes mode round-trips
// through its name, unknown names and negative AMX thresholds are refused, and a load with bad
// options fails with a line naming the field instead of running.
#include <gtest/gtest.h>

#include "backend/cpu-options.h"
#include "model/model.h"
#include "support/test-data.h"

namespace hearth {
namespace {

TEST(CpuOptions, CacheVerifyNamesRoundTrip) {
  for (auto mode : {CacheVerify::Mode::kLazy, CacheVerify::Mode::kSample, CacheVerify::Mode::kFull})
    EXPECT_EQ(parse_cache_verify(cache_verify_name(mode)), mode) << cache_verify_name(mode);
  EXPECT_STREQ(cache_verify_name(CacheVerify::Mode::kLazy), "lazy");
  EXPECT_STREQ(cache_verify_name(CacheVerify::Mode::kSample), "sample");
  EXPECT_STREQ(cache_verify_name(CacheVerify::Mode::kFull), "full");
  for (const char* bad : {"", "Full", "off", "lazy ", "ful"})
    EXPECT_FALSE(parse_cache_verify(bad).has_value()) << "'" << bad << "'";
}

TEST(CpuOptions, DecodeLanesNamesRoundTrip) {
  for (auto l : {CpuOptions::Lanes::kAuto, CpuOptions::Lanes::kOn, CpuOptions::Lanes::kOff})
    EXPECT_EQ(parse_lanes(lanes_name(l)), l) << lanes_name(l);
  EXPECT_STREQ(lanes_name(CpuOptions::Lanes::kAuto), "auto");
  for (const char* bad : {"", "On", "yes", "1", "auto "})
    EXPECT_FALSE(parse_lanes(bad).has_value()) << "'" << bad << "'";
  CpuOptions o;
  o.decode_lanes = static_cast<CpuOptions::Lanes>(7);
  EXPECT_NE(cpu_options_error(o).find("decode lanes mode 7"), std::string::npos)
      << cpu_options_error(o);
}

TEST(CpuOptions, DefaultsAreTheMeasuredBehaviour) {
  const CpuOptions o;
  EXPECT_EQ(o.decode_lanes, CpuOptions::Lanes::kAuto);
  EXPECT_TRUE(o.amx.enabled);
  EXPECT_EQ(o.amx.min_tokens, 0);
  EXPECT_EQ(o.cache_verify, CacheVerify::Mode::kLazy);
  EXPECT_EQ(cpu_options_error(o), "");
  EXPECT_EQ(CacheVerify::with_random_phase().mode, CacheVerify::Mode::kLazy);
  EXPECT_EQ(CacheVerify::with_random_phase(CacheVerify::Mode::kFull).mode,
            CacheVerify::Mode::kFull);
  EXPECT_LT(CacheVerify::with_random_phase().phase, WeightCache::kSampleStride);
}

TEST(CpuOptions, BadValuesAreNamed) {
  CpuOptions o;
  o.amx.min_tokens = -3;
  EXPECT_NE(cpu_options_error(o).find("amx min tokens -3"), std::string::npos)
      << cpu_options_error(o);
  o = CpuOptions{};
  o.cache_verify = static_cast<CacheVerify::Mode>(7);
  EXPECT_NE(cpu_options_error(o).find("cache verify"), std::string::npos) << cpu_options_error(o);
}

TEST(CpuOptions, LoadRefusesBadOptionsWithOneLine) {
  LoadOptions opt;
  opt.n_threads = 1;
  opt.use_weight_cache = false;
  opt.cpu.amx.min_tokens = -1;
  auto m = load_model(test::shared_path("goldens/kjv-13m/kjv-13m-q4_0.gguf"), opt);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.message().find("amx min tokens"), std::string::npos) << m.message();
  EXPECT_EQ(m.message().find('\n'), std::string::npos) << m.message();
}

}  // namespace
}  // namespace hearth
