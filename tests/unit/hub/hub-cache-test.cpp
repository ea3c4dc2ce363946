// The cache layout rules huggingface_hub relies on: folder names, relative snapshot symlinks
// into blobs/, refs files holding the bare commit, and the flock between processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "hub/hub-cache.h"
#include "support/test-data.h"

namespace fs = std::filesystem;

namespace hearth::hub {
namespace {

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

TEST(HubCache, LayoutAndRelativeLinks) {
  const std::string root = test::temp_dir() + "/cache-layout";
  RepoCache cache(root, "org/name");
  ASSERT_TRUE(cache.ensure_dirs().is_ok());
  EXPECT_EQ(cache.repo_dir(), root + "/models--org--name");
  test::write_file(cache.blob_path("e1"), "top");
  test::write_file(cache.blob_path("e2"), "nested");
  ASSERT_TRUE(cache.link_snapshot_file(kCommit, "a.gguf", "e1").is_ok());
  ASSERT_TRUE(cache.link_snapshot_file(kCommit, "sub/dir/b.json", "e2").is_ok());
  EXPECT_EQ(fs::read_symlink(cache.snapshot_path(kCommit, "a.gguf")).string(), "../../blobs/e1");
  EXPECT_EQ(fs::read_symlink(cache.snapshot_path(kCommit, "sub/dir/b.json")).string(),
            "../../../../blobs/e2");
  EXPECT_EQ(test::read_file(cache.snapshot_path(kCommit, "sub/dir/b.json")), "nested");
  EXPECT_TRUE(cache.has_snapshot_file(kCommit, "a.gguf"));
  EXPECT_FALSE(cache.has_snapshot_file(kCommit, "missing"));
  EXPECT_EQ(cache.list_snapshot(kCommit), (std::vector<std::string>{"a.gguf", "sub/dir/b.json"}));
  // Relinking replaces the link atomically.
  ASSERT_TRUE(cache.link_snapshot_file(kCommit, "a.gguf", "e2").is_ok());
  EXPECT_EQ(test::read_file(cache.snapshot_path(kCommit, "a.gguf")), "nested");
}

TEST(HubCache, RefsHoldTheBareCommit) {
  const std::string root = test::temp_dir() + "/cache-refs";
  RepoCache cache(root, "org/name");
  ASSERT_TRUE(cache.ensure_dirs().is_ok());
  EXPECT_FALSE(cache.resolve_revision("main").has_value());
  ASSERT_TRUE(cache.write_ref("main", kCommit).is_ok());
  EXPECT_EQ(test::read_file(root + "/models--org--name/refs/main"), kCommit);
  ASSERT_TRUE(cache.write_ref("refs/pr/1", kCommit).is_ok());
  EXPECT_EQ(test::read_file(root + "/models--org--name/refs/refs/pr/1"), kCommit);
  EXPECT_EQ(cache.resolve_revision("main").value_or(""), kCommit);
  // A commit id resolves to itself only when its snapshot exists.
  EXPECT_FALSE(cache.resolve_revision(kCommit).has_value());
  fs::create_directories(cache.snapshot_dir(kCommit));
  EXPECT_EQ(cache.resolve_revision(kCommit).value_or(""), kCommit);
  test::write_file(root + "/models--org--name/refs/bad", "not-a-commit");
  EXPECT_FALSE(cache.resolve_revision("bad").has_value());
}

TEST(HubCache, LockExcludesOtherProcesses) {
  const std::string path = test::temp_dir() + "/x.lock";
  auto held = FileLock::acquire(path);
  ASSERT_TRUE(held.is_ok());
  pid_t pid = fork();
  if (pid == 0) {
    // The child must not get the lock while the parent holds it: try without blocking.
    int fd = ::open(path.c_str(), O_RDWR);
    _exit(::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  held = FileLock();  // release
  pid = fork();
  if (pid == 0) {
    int fd = ::open(path.c_str(), O_RDWR);
    _exit(::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : 1);
  }
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace hearth::hub
