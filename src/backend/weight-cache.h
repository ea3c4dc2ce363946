// The persistent prepacked-weight cache: weights repacked for the CPU kernels are written once
// to a file keyed by (source identity, ISA, layout version) and mmapped by later loads.
// Extending: a new packed layout bumps its kernel's layout version, which changes the key.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/mapped-file.h"
#include "base/status.h"
#include "base/thread-pool.h"

namespace hearth {

// $HEARTH_CACHE_DIR, else ~/.cache/hearth/packed ($HOME unset: /tmp/hearth-packed).
std::string weight_cache_dir();
// Every cache file in weight_cache_dir() (bench drops them from the page cache for a cold load).
std::vector<std::string> weight_cache_files();

// How much of a cached payload is checked before a load may use it (docs/architecture.md,
// "Prepacked-weight cache", weighs the choices). Every mode checks the whole structure: file
// header, every record header and every record's slice-checksum table.
struct CacheVerify {
  enum class Mode {
    kLazy,    // sampled slices at load, then every slice in a background pass at idle priority
    kSample,  // sampled slices at load only
    kFull,    // every slice at load (the old behaviour: ~0.5 s per 3.5 GiB on the load path)
  };
  Mode mode = Mode::kLazy;
  // Which 1-in-kSampleStride slices a sampled check reads besides each record's first and last.
  // Random per process by default, so repeated loads cover every slice over time.
  uint32_t phase = 0;
  // `mode` with a phase drawn per process (CpuOptions::cache_verify, --cache-verify).
  static CacheVerify with_random_phase(Mode mode = Mode::kLazy);
};

// One model's packed tensors in one file. File layout (all little-endian, 64-byte aligned):
//   header: "HRTHPAK1", u32 format, u32 key length, u32 source length, key, source path
//   records: {u32 'PREC' (or 'DEAD'), u32 name length, u64 payload bytes, u64 table hash,
//             u64 header check} name, slice table (u64 per kSliceBytes of payload), payload
// The slice table holds a checksum of each 64 KiB payload slice; the table hash (in the
// checked header) covers the table. A record counts only when it lies wholly inside the file
// and its header check and table hash match; the first bad record and everything after it is
// cut off. A payload slice whose checksum fails is never used: its record is repacked and
// appended again (and marked 'DEAD' on disk when the failure is found after the load). Records
// are written payload first, header last, under an exclusive flock: a torn write leaves no
// valid-looking record behind.
class WeightCache {
 public:
  static constexpr uint64_t kSliceBytes = 64u << 10;
  static constexpr uint64_t kSampleStride = 64;    // sampled loads read 1 slice in 64 (+ ends)
  static constexpr uint64_t kSampleAllBelow = 16;  // records of <= 16 slices are read whole

  ~WeightCache();

  // Opens (or creates) the cache file for `key` in `dir`; `source` is the model file's path
  // (it names the cache file, and a new cache file sweeps away those whose source is gone or
  // changed, and those of the same source and kernel table under an older layout). Errors
  // (unwritable dir) are returned; callers treat them as "no cache".
  static Result<std::shared_ptr<WeightCache>> open(
      const std::string& dir, const std::string& key, const std::string& source,
      CacheVerify verify = CacheVerify::with_random_phase());

  // The packed bytes of tensor `name` if cached with exactly `bytes` bytes and its check (per
  // the verify mode) passes, else nullptr. The pointer is 64-byte aligned and lives as long as
  // this cache object. In lazy mode a hit is queued for the background pass.
  const uint8_t* find(const std::string& name, uint64_t bytes, ThreadPool* pool = nullptr);

  // Appends a packed tensor (a miss). Later loads find it; this load keeps using `data`.
  Status add(const std::string& name, const void* data, uint64_t bytes, ThreadPool* pool = nullptr);

  // Full verification on demand: every slice of every record this object has handed out or can
  // hand out. Records that fail are marked dead on disk (the next load repacks them). Returns
  // the number of failed records. Waits for the background pass first.
  int verify_all(ThreadPool* pool = nullptr);
  // Blocks until the lazy background pass has checked every hit so far (tests, shutdown).
  void wait_background();
  // Records found bad after they were handed out (background pass or verify_all): this process
  // may have computed with damaged weights; the next load will not.
  int late_failures() const { return late_failures_.load(); }

  const std::string& path() const { return path_; }
  int hits() const { return hits_; }
  int misses() const { return misses_; }

 private:
  struct Entry {
    uint64_t header_offset, table_offset, payload_offset, bytes;
  };
  // Checks the chosen slices of e (all when `all`); true when every one matches its table.
  bool check_slices(const Entry& e, bool all, ThreadPool* pool) const;
  void mark_dead(const Entry& e);
  void background_loop();

  std::string path_;
  uint64_t dev_ = 0, ino_ = 0;  // the file mapped: mark_dead never writes into a successor
  CacheVerify verify_;
  MappedFile map_;
  std::map<std::string, Entry, std::less<>> entries_;
  mutable std::mutex mutex_;
  int hits_ = 0;
  int misses_ = 0;
  // Lazy verification: hits waiting for the background pass, and the pass itself.
  std::vector<Entry> pending_;
  size_t pending_done_ = 0;
  std::condition_variable pending_cv_;
  std::thread verifier_;
  bool stop_ = false;
  std::atomic<int> late_failures_{0};
  std::atomic<bool> cancel_{false};  // set by the destructor: the pass stops mid-record
};

// The cache key of a source: its identity plus what the packed bytes depend on.
std::string weight_cache_key(const std::string& source_identity, const std::string& isa,
                             int layout_version);

}  // namespace hearth
