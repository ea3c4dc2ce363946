// The `hearth` binary against fixture-hub.py: `hearth pull` output modes and errors, two pulls
// at once, and `hearth run --repo-id` end to end, then again offline with the server gone.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "fixture-hub.h"
#include "support/test-data.h"

namespace fs = std::filesystem;

namespace hearth::test {
namespace {

const std::string kGguf = "kjv-13m-q4_k_m.gguf";
std::string kjv(const std::string& f) {
  return shared_path("goldens/kjv-13m/" + f);
}

std::string kjv_repo(const std::string& name) {
  const std::string root = fresh_dir(name + "-root");
  make_repo(root, "test/kjv-GGUF",
            {{kGguf, kjv(kGguf)}, {"kjv-13m-q4_0.gguf", kjv("kjv-13m-q4_0.gguf")}});
  return root;
}

std::map<std::string, std::string> env_for(const FixtureHub& hub, const std::string& cache) {
  // Hermetic: no token or cache of the person running the tests leaks in.
  return {{"HF_ENDPOINT", hub.endpoint()},
          {"HF_HUB_CACHE", cache},
          {"HF_TOKEN", ""},
          {"HF_HOME", cache + "/home"},
          {"HF_TOKEN_PATH", cache + "/no-token"},
          {"HF_HUB_OFFLINE", "0"}};
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

TEST(HubCli, PullQuietPrintsOnlyThePath) {
  auto hub = FixtureHub::start(kjv_repo("cli-quiet"));
  ASSERT_TRUE(hub);
  const std::string cache = fresh_dir("cli-quiet-cache");
  auto r = run_hearth(env_for(*hub, cache), {"pull", "test/kjv-GGUF:q4_k_m", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string path = first_line(r.out);
  EXPECT_EQ(r.out, path + "\n");
  EXPECT_EQ(path.rfind(cache + "/models--test--kjv-GGUF/snapshots/", 0), 0u) << path;
  EXPECT_TRUE(read_file(path) == read_file(kjv(kGguf)));
}

TEST(HubCli, PullShowsPlainLinesWhenNotATerminal) {
  auto hub = FixtureHub::start(kjv_repo("cli-lines"));
  ASSERT_TRUE(hub);
  const std::string cache = fresh_dir("cli-lines-cache");
  auto r = run_hearth(env_for(*hub, cache), {"pull", "test/kjv-GGUF:Q4_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("pulling kjv-13m-q4_0.gguf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sha256 verified"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "no terminal escapes in a log";
  auto again = run_hearth(env_for(*hub, cache), {"pull", "test/kjv-GGUF:Q4_0"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("already in the cache"), std::string::npos) << again.err;
  EXPECT_EQ(again.out, r.out);
  EXPECT_EQ(hub->count("GET", "/cdn/"), 1);
}

TEST(HubCli, ClearErrors) {
  const std::string root = kjv_repo("cli-err");
  auto hub = FixtureHub::start(root, {"--gated", "test/kjv-GGUF=hf_secret"});
  ASSERT_TRUE(hub);
  const std::string cache = fresh_dir("cli-err-cache");
  auto gated = run_hearth(env_for(*hub, cache), {"pull", "test/kjv-GGUF:Q4_0"});
  EXPECT_NE(gated.exit_code, 0);
  EXPECT_EQ(gated.err.rfind("hearth: error: ", 0), 0u) << gated.err;
  EXPECT_NE(gated.err.find("HF_TOKEN"), std::string::npos) << gated.err;
  auto env = env_for(*hub, cache);
  env["HF_TOKEN"] = "hf_secret";
  auto ok = run_hearth(env, {"pull", "test/kjv-GGUF:Q4_0", "-q"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  auto bad = run_hearth(env, {"pull", "not a repo"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("ORG/NAME"), std::string::npos) << bad.err;
  auto missing = run_hearth(env, {"run", "-m", "./no/such.gguf", "-p", "x"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << missing.err;
}

TEST(HubCli, TwoPullsAtOnceShareOneBlob) {
  auto hub = FixtureHub::start(kjv_repo("cli-two"), {"--slow", "10000000"});
  ASSERT_TRUE(hub);
  const std::string cache = fresh_dir("cli-two-cache");
  CommandResult a, b;
  std::thread ta([&] { a = run_hearth(env_for(*hub, cache), {"pull", "test/kjv-GGUF:Q4_K_M"}); });
  std::thread tb([&] { b = run_hearth(env_for(*hub, cache), {"pull", "test/kjv-GGUF:Q4_K_M"}); });
  ta.join();
  tb.join();
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  int blobs = 0;
  for (auto& e : fs::directory_iterator(cache + "/models--test--kjv-GGUF/blobs")) {
    ++blobs;
    EXPECT_TRUE(read_file(e.path()) == read_file(kjv(kGguf)));
  }
  EXPECT_EQ(blobs, 1);
  EXPECT_EQ(hub->count("GET", "/cdn/"), 1);
}

TEST(HubCli, RunWithRepoIdThenOffline) {
  const std::vector<std::string> gen = {"-p", "And the king said",  "-n", "12", "--temp",
                                        "0",  "--no-display-prompt"};
  auto with = [&](std::vector<std::string> head) {
    head.insert(head.end(), gen.begin(), gen.end());
    return head;
  };
  // The reference: the same file run from ../shared directly.
  auto local = run_command(with({hearth_cli(), "run", "-m", kjv(kGguf)}));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  ASSERT_FALSE(local.out.empty());

  auto hub = FixtureHub::start(kjv_repo("cli-run"));
  ASSERT_TRUE(hub);
  const std::string cache = fresh_dir("cli-run-cache");
  auto online =
      run_hearth(env_for(*hub, cache), with({"run", "--repo-id", "test/kjv-GGUF:Q4_K_M"}));
  ASSERT_EQ(online.exit_code, 0) << online.err;
  EXPECT_EQ(online.out, local.out);
  EXPECT_EQ(hub->count("GET", "/cdn/"), 1);

  hub->stop();  // the hub is gone: only the cache can answer now
  auto env = env_for(*hub, cache);
  env["HF_HUB_OFFLINE"] = "1";
  auto offline = run_hearth(env, with({"run", "--repo-id", "test/kjv-GGUF:Q4_K_M"}));
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  EXPECT_EQ(offline.out, local.out);
  auto via_m = run_hearth(env, with({"run", "-m", "test/kjv-GGUF:q4_k_m"}));
  ASSERT_EQ(via_m.exit_code, 0) << via_m.err;
  EXPECT_EQ(via_m.out, local.out);
  // Offline and absent from the cache: a clear error, no network attempt.
  auto absent = run_hearth(env, with({"run", "--repo-id", "test/kjv-GGUF:Q8_0"}));
  EXPECT_NE(absent.exit_code, 0);
  EXPECT_NE(absent.err.find("Q8_0"), std::string::npos) << absent.err;
}

TEST(HubCli, RunSafetensorsRepo) {
  const std::string root = fresh_dir("cli-st-root");
  make_repo(root, "test/kjv-13m",
            {{"config.json", kjv("config.json")},
             {"model.safetensors", kjv("model.safetensors")},
             {"tokenizer.model", kjv("tokenizer.model")},
             {"tokenizer_config.json", kjv("tokenizer_config.json")},
             {"golden.json", kjv("golden.json")}});
  const std::vector<std::string> gen = {"-p", "And the king said",  "-n", "8", "--temp",
                                        "0",  "--no-display-prompt"};
  std::vector<std::string> local_args = {hearth_cli(), "run", "-m", shared_path("goldens/kjv-13m")};
  local_args.insert(local_args.end(), gen.begin(), gen.end());
  auto local = run_command(local_args);
  ASSERT_EQ(local.exit_code, 0) << local.err;
  auto hub = FixtureHub::start(root);
  ASSERT_TRUE(hub);
  std::vector<std::string> args = {"run", "--repo-id", "test/kjv-13m"};
  args.insert(args.end(), gen.begin(), gen.end());
  auto r = run_hearth(env_for(*hub, fresh_dir("cli-st-cache")), args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, local.out);
  // golden.json is not a model file: it stays on the server.
  EXPECT_EQ(hub->count("HEAD", "/test/kjv-13m/resolve/"), 4);
}

}  // namespace
}  // namespace hearth::test
