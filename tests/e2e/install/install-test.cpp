// Installs the current build's libhearth into a temp prefix and builds examples/c against it
// out of tree (find_package and pkg-config), then checks both binaries and examples/python
// reproduce llama2-tiny's greedy golden gen_ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "support/golden-data.h"
#include "support/test-data.h"

namespace hearth::test {
namespace {

namespace fs = std::filesystem;

const char* kPrompt = "Once upon a time, in a land far away, there lived";

std::string tiny_gguf() {
  return shared_path("goldens/llama2-tiny/llama2-tiny-bf16.gguf");
}

// The ids the examples print on stderr as "ids: 1 2 3".
std::vector<int32_t> parse_ids(const std::string& err) {
  const size_t at = err.find("ids:");
  std::vector<int32_t> ids;
  if (at == std::string::npos) return ids;
  std::istringstream in(err.substr(at + 4, err.find('\n', at) - at - 4));
  int32_t id;
  while (in >> id) ids.push_back(id);
  return ids;
}

// Runs a program that loads the installed library; a sanitized library needs its runtime
// preloaded (Python's own allocations are not ours to leak-check).
CommandResult run_client(std::vector<std::string> argv, bool leak_check = true) {
#ifdef HEARTH_TEST_ASAN_RUNTIME
  std::vector<std::string> env = {"env", std::string("LD_PRELOAD=") + HEARTH_TEST_ASAN_RUNTIME};
  if (!leak_check) env.push_back("ASAN_OPTIONS=detect_leaks=0");
  argv.insert(argv.begin(), env.begin(), env.end());
#endif
  (void)leak_check;
  return run_command(argv);
}

std::string describe(const CommandResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

class InstallTest : public ::testing::Test {
 protected:
  // One install per test process (the prefix is shared by the tests below).
  static void SetUpTestSuite() {
    prefix_ = temp_dir() + "/prefix";
    install_ = run_command({HEARTH_TEST_CMAKE, "--install", binary_dir(), "--prefix", prefix_,
                            "--component", "hearth_library"});
  }
  void SetUp() override { ASSERT_EQ(install_.exit_code, 0) << describe(install_); }
  static std::string libdir() { return prefix_ + "/" + HEARTH_TEST_INSTALL_LIBDIR; }

  static std::string prefix_;
  static CommandResult install_;
};
std::string InstallTest::prefix_;
CommandResult InstallTest::install_;

TEST_F(InstallTest, InstallsLibraryHeadersAndPackageFiles) {
  for (const std::string rel :
       {"include/hearth/hearth.h", "include/hearth/hearth.hpp",
        "lib/cmake/hearth/hearth-config.cmake", "lib/cmake/hearth/hearth-config-version.cmake",
        "lib/cmake/hearth/hearth-targets.cmake", "lib/pkgconfig/hearth.pc", "lib/libhearth.so"}) {
    std::string path = prefix_ + "/" + rel;
    if (rel.rfind("lib/", 0) == 0) path = libdir() + rel.substr(3);
    EXPECT_TRUE(fs::exists(path)) << path;
  }
  // Only the library component: no CLI, no engine headers.
  EXPECT_FALSE(fs::exists(prefix_ + "/bin/hearth"));
  EXPECT_FALSE(fs::exists(prefix_ + "/include/runtime"));
}

TEST_F(InstallTest, FindPackageExampleReproducesGoldenIds) {
  const Golden g = load_golden(shared_path("goldens/llama2-tiny"));
  const std::string build = temp_dir() + "/example-find-package";
  const CommandResult conf =
      run_command({HEARTH_TEST_CMAKE, "-S", source_dir() + "/examples/c", "-B", build, "-G",
                   "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=" + prefix_});
  ASSERT_EQ(conf.exit_code, 0) << describe(conf);
  const CommandResult make = run_command({HEARTH_TEST_CMAKE, "--build", build});
  ASSERT_EQ(make.exit_code, 0) << describe(make);
  const CommandResult run =
      run_client({build + "/simple", "-m", tiny_gguf(), "-p", kPrompt, "-n", "24", "--ids"});
  ASSERT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_EQ(parse_ids(run.err), g.gen_ids) << run.err;
  EXPECT_EQ(run.out.rfind(kPrompt, 0), 0u) << run.out;  // the prompt, then the streamed text
  EXPECT_GT(run.out.size(), std::string(kPrompt).size() + 24);
  // Library errors reach the app as a status name and message.
  const CommandResult bad = run_client({build + "/simple", "-m", "/no/such/model.gguf"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("HEARTH_ERR_NOT_FOUND"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("/no/such/model.gguf"), std::string::npos) << bad.err;
}

TEST_F(InstallTest, PkgConfigExampleReproducesGoldenIds) {
  const Golden g = load_golden(shared_path("goldens/llama2-tiny"));
  const std::string pc_path = "PKG_CONFIG_PATH=" + libdir() + "/pkgconfig";
  const CommandResult flags =
      run_command({"env", pc_path, "pkg-config", "--cflags", "--libs", "hearth"});
  ASSERT_EQ(flags.exit_code, 0) << describe(flags);
  EXPECT_NE(flags.out.find("-lhearth"), std::string::npos) << flags.out;
  const std::string exe = temp_dir() + "/simple-pc";
  const CommandResult make =
      run_command({"env", pc_path, "make", "-C", source_dir() + "/examples/c", "OUT=" + exe});
  ASSERT_EQ(make.exit_code, 0) << describe(make);
  const CommandResult run =
      run_client({exe, "-m", tiny_gguf(), "-p", kPrompt, "-n", "24", "--ids"});
  ASSERT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_EQ(parse_ids(run.err), g.gen_ids) << run.err;
  // The binary found the installed library, not the build tree's.
  const CommandResult ldd = run_command({"ldd", exe});
  EXPECT_NE(ldd.out.find(fs::canonical(libdir()).string()), std::string::npos) << ldd.out;
}

TEST_F(InstallTest, PythonCtypesExampleReproducesGoldenIds) {
  const Golden g = load_golden(shared_path("goldens/llama2-tiny"));
  const CommandResult run =
      run_client({"/usr/bin/python3", source_dir() + "/examples/python/simple.py", "--lib",
                  HEARTH_TEST_LIBRARY, "-m", tiny_gguf(), "-p", kPrompt, "-n", "24", "--ids"},
                 /*leak_check=*/false);
  ASSERT_EQ(run.exit_code, 0) << describe(run);
  EXPECT_EQ(parse_ids(run.err), g.gen_ids) << run.err;
  EXPECT_EQ(run.out.rfind(kPrompt, 0), 0u) << run.out;
}

}  // namespace
}  // namespace hearth::test
