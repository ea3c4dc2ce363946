// Environment resolution with huggingface_hub's precedence: HF_HUB_CACHE > HF_HOME/hub, HF_TOKEN >
// token file, HF_HUB_OFFLINE spellings, HF_ENDPOINT trailing slash.
#include <gtest/gtest.h>

#include <cstdlib>

#include "hub/hub-env.h"
#include "support/test-data.h"

namespace hearth::hub {
namespace {

void clear_env() {
  for (const char* v :
       {"HF_ENDPOINT", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "XDG_CACHE_HOME"})
    unsetenv(v);
}

TEST(HubEnv, Defaults) {
  clear_env();
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_home ? old_home : "";
  setenv("HOME", "/home/u", 1);
  HubEnv env = hub_env_from_environment();
  if (old_home) setenv("HOME", saved.c_str(), 1);
  EXPECT_EQ(env.endpoint, "https://huggingface.co");
  EXPECT_EQ(env.cache_dir, "/home/u/.cache/huggingface/hub");
  EXPECT_FALSE(env.offline);
}

TEST(HubEnv, Overrides) {
  clear_env();
  const std::string home = test::temp_dir() + "/hfhome";
  std::system(("mkdir -p " + home).c_str());
  test::write_file(home + "/token", "hf_fromfile\n");
  setenv("HF_HOME", home.c_str(), 1);
  setenv("HF_ENDPOINT", "http://127.0.0.1:9/", 1);
  setenv("HF_HUB_OFFLINE", "True", 1);
  HubEnv env = hub_env_from_environment();
  EXPECT_EQ(env.endpoint, "http://127.0.0.1:9");
  EXPECT_EQ(env.cache_dir, home + "/hub");
  EXPECT_EQ(env.token, "hf_fromfile");
  EXPECT_TRUE(env.offline);
  setenv("HF_TOKEN", "hf_env", 1);
  setenv("HF_HUB_CACHE", "/elsewhere", 1);
  env = hub_env_from_environment();
  EXPECT_EQ(env.token, "hf_env");
  EXPECT_EQ(env.token_source, "HF_TOKEN");
  EXPECT_EQ(env.cache_dir, "/elsewhere");
  clear_env();
}

TEST(HubEnv, OfflineSpellings) {
  for (const char* on : {"1", "true", "YES", "On"}) EXPECT_TRUE(env_flag_is_true(on)) << on;
  for (const char* off : {"0", "false", "", "no"}) EXPECT_FALSE(env_flag_is_true(off)) << off;
  EXPECT_FALSE(env_flag_is_true(nullptr));
}

}  // namespace
}  // namespace hearth::hub
