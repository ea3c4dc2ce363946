// Read-only memory-mapped files: the zero-copy source of every tensor view.
// A MappedFile is movable, not copyable; views into it live as long as it does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace hearth {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  static Result<MappedFile> open(const std::string& path);

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Identity for caches: device, inode, size and modification time.
  const std::string& identity() const { return identity_; }

  // Asks the kernel to read ahead (MADV_WILLNEED) or to keep pages (used before a decode loop).
  void advise_willneed() const;

  // Drops this process's pages of [p, p + bytes) where the range lies in a live MappedFile
  // (whole pages inside it; anything else is left alone). Nothing is lost: the mapping is
  // read-only, so a later read faults a page back from the page cache or the file. For source
  // bytes a load has copied elsewhere (packed weights): without it a first load held both.
  static void release_pages(const void* p, uint64_t bytes);

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
  std::string identity_;
};

// Reads a whole (small) file into a string: config.json, tokenizer_config.json, templates.
Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes = 64u << 20);

bool file_exists(const std::string& path);
bool is_directory(const std::string& path);

}  // namespace hearth
