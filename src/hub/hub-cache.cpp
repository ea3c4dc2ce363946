// HF cache layout operations. Visibility rules: a blob appears only by rename after verification,
// a snapshot entry only by rename of a finished symlink, so readers never see partial state.
#include "hub/hub-cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/atomic-file.h"
#include "hub/repo-spec.h"

namespace fs = std::filesystem;

namespace hearth::hub {

Status make_dirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec && !fs::is_directory(path))
    return Status::error(path + ": cannot create directory: " + ec.message());
  return Status::ok();
}

RepoCache::RepoCache(std::string cache_dir, const std::string& repo_id)
    : cache_dir_(std::move(cache_dir)), folder_(repo_folder_name(repo_id)) {
  repo_dir_ = cache_dir_ + "/" + folder_;
}

std::string RepoCache::blob_path(const std::string& etag) const {
  return repo_dir_ + "/blobs/" + etag;
}
std::string RepoCache::snapshot_dir(const std::string& commit) const {
  return repo_dir_ + "/snapshots/" + commit;
}
std::string RepoCache::snapshot_path(const std::string& commit, const std::string& file) const {
  return snapshot_dir(commit) + "/" + file;
}
std::string RepoCache::lock_path(const std::string& etag) const {
  return cache_dir_ + "/.locks/" + folder_ + "/" + etag + ".lock";
}
std::string RepoCache::ref_path(const std::string& revision) const {
  return repo_dir_ + "/refs/" + revision;
}

Status RepoCache::ensure_dirs() const {
  for (const char* sub : {"/blobs", "/snapshots", "/refs"}) HEARTH_TRY(make_dirs(repo_dir_ + sub));
  return make_dirs(cache_dir_ + "/.locks/" + folder_);
}

std::optional<std::string> RepoCache::resolve_revision(const std::string& revision) const {
  if (is_commit_hash(revision) && fs::is_directory(snapshot_dir(revision))) return revision;
  std::ifstream in(ref_path(revision));
  if (!in) return std::nullopt;
  std::string commit;
  std::getline(in, commit);
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back())))
    commit.pop_back();
  if (!is_commit_hash(commit)) return std::nullopt;
  return commit;
}

Status RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return Status::ok();
  const std::string path = ref_path(revision);
  // A branch name like "refs/pr/1" nests: create its parent folder.
  HEARTH_TRY(make_dirs(fs::path(path).parent_path().string()));
  if (auto current = resolve_revision(revision); current && *current == commit) return Status::ok();
  return write_file_atomic(path, commit);  // no trailing newline, as huggingface_hub writes it
}

bool RepoCache::has_snapshot_file(const std::string& commit, const std::string& file) const {
  std::error_code ec;
  return fs::is_regular_file(snapshot_path(commit, file), ec);  // follows the symlink
}

Status RepoCache::link_snapshot_file(const std::string& commit, const std::string& file,
                                     const std::string& etag) const {
  const fs::path link = snapshot_path(commit, file);
  HEARTH_TRY(make_dirs(link.parent_path().string()));
  // Relative target: one "../" per folder between the link and the repo folder, so the cache can
  // be moved or mounted elsewhere (huggingface_hub writes the same relative links).
  const fs::path rel = fs::path(blob_path(etag)).lexically_relative(link.parent_path());
  const std::string tmp = link.string() + "." + std::to_string(::getpid()) + ".link";
  ::unlink(tmp.c_str());
  if (::symlink(rel.c_str(), tmp.c_str()) != 0)
    return Status::error(tmp + ": cannot create symlink: " + std::strerror(errno));
  if (::rename(tmp.c_str(), link.c_str()) != 0) {
    Status s = Status::error(link.string() + ": rename failed: " + std::strerror(errno));
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::ok();
}

std::vector<std::string> RepoCache::list_snapshot(const std::string& commit) const {
  std::vector<std::string> out;
  const fs::path root = snapshot_dir(commit);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec))  // follows symlinks; dangling links are skipped
      out.push_back(it->path().lexically_relative(root).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

Result<FileLock> FileLock::acquire(const std::string& path, const std::function<void()>& on_wait) {
  FileLock lock;
  lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0) return Status::error(path + ": cannot open lock file: " + std::strerror(errno));
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) == 0) return lock;
  if (errno != EWOULDBLOCK) return Status::error(path + ": flock failed: " + std::strerror(errno));
  if (on_wait) on_wait();
  // Blocking wait: the holder is another live process (the kernel drops locks of dead ones).
  while (::flock(lock.fd_, LOCK_EX) != 0) {
    if (errno != EINTR) return Status::error(path + ": flock failed: " + std::strerror(errno));
  }
  return lock;
}

}  // namespace hearth::hub
