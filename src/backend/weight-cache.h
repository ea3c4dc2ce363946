// The persistent prepacked-weight cache: weights repacked for the CPU kernels are written once
// to a file keyed by (source identity, ISA, layout version) and mmapped by later loads.
// Extending: a new packed layout bumps its kernel's layout version, which changes the key.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/mapped-file.h"
#include "base/status.h"
#include "base/thread-pool.h"

namespace hearth {

// $HEARTH_CACHE_DIR, else ~/.cache/hearth/packed ($HOME unset: /tmp/hearth-packed).
std::string weight_cache_dir();
// Every cache file in weight_cache_dir() (bench drops them from the page cache for a cold load).
std::vector<std::string> weight_cache_files();

// One model's packed tensors in one file. File layout (all little-endian, 64-byte aligned):
//   header: "HRTHPAK1", u32 format, u32 key length, u32 source length, key, source path
//   records: {u32 'PREC', u32 name length, u64 payload bytes, u64 payload checksum,
//             u64 header check} name, payload
// A record counts only when it lies wholly inside the file and its header check matches; the
// first bad record and everything after it is cut off. A payload whose checksum fails at load
// is repacked and appended again. So a torn write or a damaged file costs a repack, never a
// crash or wrong results.
class WeightCache {
 public:
  // Opens (or creates) the cache file for `key` in `dir`; `source` is the model file's path
  // (it names the cache file, and a new cache file sweeps away those whose source is gone or
  // changed). Errors (unwritable dir) are returned; callers treat them as "no cache".
  static Result<std::shared_ptr<WeightCache>> open(const std::string& dir, const std::string& key,
                                                   const std::string& source);

  // The packed bytes of tensor `name` if cached with exactly `bytes` bytes, else nullptr. The
  // pointer is 64-byte aligned and lives as long as this cache object.
  // The payload's checksum is verified (over `pool` when given).
  const uint8_t* find(const std::string& name, uint64_t bytes, ThreadPool* pool = nullptr) const;

  // Appends a packed tensor (a miss). Later loads find it; this load keeps using `data`.
  Status add(const std::string& name, const void* data, uint64_t bytes, ThreadPool* pool = nullptr);

  // The payload checksum (1 MiB slices, summed in parallel over `pool` when given).
  static uint64_t checksum(const uint8_t* p, uint64_t bytes, ThreadPool* pool);

  const std::string& path() const { return path_; }
  int hits() const { return hits_; }
  int misses() const { return misses_; }

 private:
  struct Entry {
    uint64_t offset, bytes, check;
  };
  std::string path_;
  MappedFile map_;
  std::map<std::string, Entry, std::less<>> entries_;
  mutable std::mutex mutex_;
  mutable int hits_ = 0;
  int misses_ = 0;
};

// The cache key of a source: its identity plus what the packed bytes depend on.
std::string weight_cache_key(const std::string& source_identity, const std::string& isa,
                             int layout_version);

}  // namespace hearth
