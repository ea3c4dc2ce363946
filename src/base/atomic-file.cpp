// AtomicFile: temporary name, buffered writes, rename into place. The temporary carries the pid
// so two processes writing the same target (hub downloads) never share one.
// A new open mode (append, exclusive) would be a second factory next to create().
#include "base/atomic-file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hearth {

Result<AtomicFile> AtomicFile::create(const std::string& path) {
  AtomicFile f;
  f.path_ = path;
  f.tmp_ = path + "." + std::to_string(::getpid()) + ".partial";
  f.f_ = std::fopen(f.tmp_.c_str(), "wb");
  if (!f.f_) return Status::error(path + ": cannot create: " + std::strerror(errno));
  return f;
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_(std::move(other.tmp_)),
      f_(other.f_),
      written_(other.written_) {
  other.f_ = nullptr;
}

AtomicFile::~AtomicFile() {
  discard();
}

void AtomicFile::discard() {
  if (!f_) return;
  std::fclose(f_);
  f_ = nullptr;
  std::remove(tmp_.c_str());
}

Status AtomicFile::write(const void* p, uint64_t n) {
  if (!f_) return Status::error(path_ + ": file is closed");
  if (n == 0) return Status::ok();  // empty tensors: p may be null, fwrite must not see it
  if (std::fwrite(p, 1, n, f_) != n) {
    discard();
    return Status::error(path_ + ": write failed (disk full?)");
  }
  written_ += n;
  return Status::ok();
}

Status AtomicFile::commit() {
  if (!f_) return Status::error(path_ + ": file is closed");
  const bool flushed = std::fflush(f_) == 0;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!flushed || !closed) {
    std::remove(tmp_.c_str());
    return Status::error(path_ + ": write failed (disk full?)");
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp_.c_str());
    return Status::error(path_ + ": cannot rename into place: " + why);
  }
  return Status::ok();
}

Status write_file_atomic(const std::string& path, const std::string& content) {
  HEARTH_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  HEARTH_TRY(f.write(content.data(), content.size()));
  return f.commit();
}

}  // namespace hearth
