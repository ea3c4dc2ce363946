// The Hugging Face cache layout, shared with huggingface_hub: <cache>/models--ORG--NAME/
// {blobs/<etag>, snapshots/<commit>/<path> -> ../../blobs/<etag>, refs/<revision>} plus
// <cache>/.locks/models--ORG--NAME/<etag>.lock. New cache features extend RepoCache.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::hub {

class RepoCache {
 public:
  RepoCache(std::string cache_dir, const std::string& repo_id);

  const std::string& repo_dir() const { return repo_dir_; }
  std::string blob_path(const std::string& etag) const;
  std::string snapshot_dir(const std::string& commit) const;
  std::string snapshot_path(const std::string& commit, const std::string& file) const;
  std::string lock_path(const std::string& etag) const;
  std::string ref_path(const std::string& revision) const;

  // The commit a revision points to: the revision itself when it is a 40-hex commit that has a
  // snapshot, else the content of refs/<revision>. nullopt when unknown.
  std::optional<std::string> resolve_revision(const std::string& revision) const;
  // Writes refs/<revision> = commit (atomically), unless revision is that commit.
  Status write_ref(const std::string& revision, const std::string& commit) const;

  // True when snapshots/<commit>/<file> exists and resolves to a readable file.
  bool has_snapshot_file(const std::string& commit, const std::string& file) const;
  // Points snapshots/<commit>/<file> at blobs/<etag> with a relative symlink (atomic replace).
  Status link_snapshot_file(const std::string& commit, const std::string& file,
                            const std::string& etag) const;
  // Relative paths of every file in snapshots/<commit> (sorted).
  std::vector<std::string> list_snapshot(const std::string& commit) const;

  // Creates blobs/, snapshots/, refs/ and the lock folder.
  Status ensure_dirs() const;

 private:
  std::string cache_dir_;
  std::string folder_;
  std::string repo_dir_;
};

// An exclusive advisory lock (flock) on a file, released on destruction or process exit, so a
// crashed downloader never leaves a stale lock. Compatible with huggingface_hub's filelock.
class FileLock {
 public:
  FileLock() = default;
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  // Takes the lock; when another process holds it, calls on_wait() once and then blocks.
  static Result<FileLock> acquire(const std::string& path,
                                  const std::function<void()>& on_wait = nullptr);

 private:
  int fd_ = -1;
};

// Creates a directory and its parents; ok when it exists.
Status make_dirs(const std::string& path);

}  // namespace hearth::hub
