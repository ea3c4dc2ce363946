// Files that appear under their real name only when complete: bytes go to a temporary beside the
// target (unique per process), commit() renames it into place, and anything unfinished is removed.
// Every writer of output files (GGUF, safetensors, the hub cache) goes through here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "base/status.h"

namespace hearth {

class AtomicFile {
 public:
  // Creates `path`'s temporary. Errors name `path`.
  static Result<AtomicFile> create(const std::string& path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // an uncommitted file removes its temporary

  // Appends bytes; a short write (disk full) is an error. n == 0 is a no-op (p may be null).
  Status write(const void* p, uint64_t n);
  // Flushes, closes and renames the temporary to the real name. The file is closed after it,
  // whatever the outcome.
  Status commit();

  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return written_; }

 private:
  AtomicFile() = default;
  void discard();
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
};

// The whole file at once: config files, refs, small outputs.
Status write_file_atomic(const std::string& path, const std::string& content);

}  // namespace hearth
