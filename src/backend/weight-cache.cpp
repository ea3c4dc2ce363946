// WeightCache: an append-only file of packed tensors, validated record by record at open.
// Writers hold an exclusive flock, so two processes loading the same model cannot interleave.
// Payloads are checked per 64 KiB slice against a checksum table written with them: sampled at
// load, every slice off the critical path (docs/architecture.md, "Prepacked-weight cache").
#include "backend/weight-cache.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <utility>

#include "base/log.h"

namespace hearth {

namespace {

constexpr char kMagic[8] = {'H', 'R', 'T', 'H', 'P', 'A', 'K', '1'};
constexpr uint32_t kFormat = 3;                // 3: per-slice checksum tables (2: source path)
constexpr uint32_t kRecordMagic = 0x43455250;  // "PREC"
constexpr uint32_t kDeadMagic = 0x44414544;    // "DEAD": well-formed, but its payload failed
constexpr uint64_t kAlign = 64;
constexpr uint64_t kSlice = WeightCache::kSliceBytes;

uint64_t align_up(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t n_slices(uint64_t bytes) {
  return (bytes + kSlice - 1) / kSlice;
}

// Hash of a slice table, a word at a time (a 7B model's table is ~450 KB: read at every open).
uint64_t table_hash(const uint64_t* t, uint64_t n, uint64_t bytes) {
  uint64_t h = 0xcbf29ce484222325ull ^ bytes;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t w;
    std::memcpy(&w, t + i, 8);
    h = (h ^ w) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  return h;
}

struct RecordHeader {
  uint32_t magic;
  uint32_t name_len;
  uint64_t bytes;
  uint64_t table_hash;  // table_hash() of the slice table
  uint64_t check;       // fnv1a over name, bytes and table_hash: torn or garbage headers
};

uint64_t record_check(const std::string& name, uint64_t bytes, uint64_t table_hash) {
  uint64_t h = fnv1a(name.data(), name.size());
  h = fnv1a(&bytes, sizeof bytes, h);
  return fnv1a(&table_hash, sizeof table_hash, h);
}

// Record geometry after its header: name, then the table and the payload, each 64-aligned.
struct RecordLayout {
  uint64_t table, payload, end;
};
RecordLayout layout_at(uint64_t off, uint32_t name_len, uint64_t bytes) {
  const uint64_t table = align_up(off + sizeof(RecordHeader) + name_len);
  const uint64_t payload = align_up(table + n_slices(bytes) * 8);
  return {table, payload, align_up(payload + bytes)};
}

// Fletcher-style sums over 8 interleaved u64 lanes: vectorizes, and catches flipped, swapped or
// zeroed words. Each slice's sum is mixed with its index so slices cannot trade places.
uint64_t slice_checksum(const uint8_t* p, uint64_t n, uint64_t index) {
  uint64_t a[8] = {}, b[8] = {};
  uint64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t w[8];
    std::memcpy(w, p + i, 64);
    for (int k = 0; k < 8; ++k) {
      a[k] += w[k];
      b[k] += a[k];
    }
  }
  uint64_t h = 0x9E3779B97F4A7C15ull * (index + 1);
  for (int k = 0; k < 8; ++k) h = (h ^ a[k]) * 0x100000001B3ull ^ b[k];
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

uint64_t slice_sum_at(const uint8_t* payload, uint64_t bytes, uint64_t s) {
  const uint64_t off = s * kSlice;
  return slice_checksum(payload + off, std::min(kSlice, bytes - off), s);
}

std::vector<uint8_t> file_header(const std::string& key, const std::string& source) {
  std::vector<uint8_t> h(20 + key.size() + source.size());
  std::memcpy(h.data(), kMagic, 8);
  const uint32_t format = kFormat, len = uint32_t(key.size()), plen = uint32_t(source.size());
  std::memcpy(h.data() + 8, &format, 4);
  std::memcpy(h.data() + 12, &len, 4);
  std::memcpy(h.data() + 16, &plen, 4);
  std::memcpy(h.data() + 20, key.data(), key.size());
  std::memcpy(h.data() + 20 + key.size(), source.data(), source.size());
  h.resize(align_up(h.size()), 0);
  return h;
}

// The kernel table a key was written for: the part after the source identity's "|" up to the
// first ':' or '|' (weight_cache_key's isa is the table's layouts signature, "avx512:1v1:...").
std::string_view key_table(std::string_view key, size_t identity_prefix) {
  const std::string_view rest = key.substr(identity_prefix);
  return rest.substr(0, rest.find_first_of(":|"));
}

// Removes cache files whose source is gone or changed (its identity no longer starts their
// key), files of older formats, and files of the same source and kernel table under another
// key (written before a layout's version changed: this build never reads them again; a folder
// shared by two builds of different layouts would rebuild in turn), so the folder does not grow
// with every edited or temporary model or every update. A process still mapping a removed file
// keeps its pages (unlink, not truncate).
void sweep_stale(const std::string& dir, const std::string& keep, const std::string& keep_key) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = e.path().string();
    if (f == keep || e.path().extension() != ".hpk" || !e.is_regular_file(ec)) continue;
    std::ifstream in(f, std::ios::binary);
    char head[20] = {};
    if (!in.read(head, sizeof head) || std::memcmp(head, kMagic, 8) != 0) continue;  // not ours
    uint32_t format = 0, klen = 0, plen = 0;
    std::memcpy(&format, head + 8, 4);
    std::memcpy(&klen, head + 12, 4);
    std::memcpy(&plen, head + 16, 4);
    bool stale = format != kFormat || klen > 4096 || plen > 4096;
    if (!stale) {
      std::string key(klen, '\0'), source(plen, '\0');
      stale = !in.read(key.data(), klen) || !in.read(source.data(), plen);
      if (!stale) {
        auto src = MappedFile::open(source);
        const std::string prefix = src.is_ok() ? src.value().identity() + "|" : std::string();
        stale = !src.is_ok() || key.rfind(prefix, 0) != 0;
        if (!stale && key != keep_key && keep_key.rfind(prefix, 0) == 0)
          stale = key_table(key, prefix.size()) == key_table(keep_key, prefix.size());
      }
    }
    if (stale) std::filesystem::remove(e.path(), ec);
  }
}

Status write_all(int fd, const void* data, uint64_t n, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::error(path + ": write failed: " + std::strerror(errno));
    p += w;
    n -= uint64_t(w);
    offset += uint64_t(w);
  }
  return Status::ok();
}

// An fd holding an exclusive flock, closed on scope exit.
struct LockedFile {
  int fd = -1;
  LockedFile() = default;
  LockedFile(LockedFile&& o) noexcept : fd(o.fd) { o.fd = -1; }
  LockedFile& operator=(LockedFile&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~LockedFile() {
    if (fd >= 0) ::close(fd);  // closing drops the flock
  }
};

Result<LockedFile> lock_file(const std::string& path) {
  LockedFile f;
  f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (f.fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  if (::flock(f.fd, LOCK_EX) != 0)
    return Status::error(path + ": cannot lock: " + std::strerror(errno));
  return f;
}

}  // namespace

std::string weight_cache_dir() {
  if (const char* d = std::getenv("HEARTH_CACHE_DIR"); d && *d) return d;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/hearth/packed";
  return "/tmp/hearth-packed";
}

std::vector<std::string> weight_cache_files() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(weight_cache_dir(), ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".hpk") out.push_back(e.path().string());
  return out;
}

std::string weight_cache_key(const std::string& source_identity, const std::string& isa,
                             int layout_version) {
  return source_identity + "|" + isa + "|layout" + std::to_string(layout_version);
}

CacheVerify CacheVerify::with_random_phase(Mode mode) {
  CacheVerify v;
  v.mode = mode;
  // A different phase per process: the slices a sampled load skips, the next one reads.
  const auto now = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  v.phase = uint32_t((now ^ (uint64_t(::getpid()) << 16)) % WeightCache::kSampleStride);
  return v;
}

Result<std::shared_ptr<WeightCache>> WeightCache::open(const std::string& dir,
                                                       const std::string& key,
                                                       const std::string& label,
                                                       CacheVerify verify) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::error(dir + ": cannot create the weight cache folder: " + ec.message());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a(key.data(), key.size()));
  std::string stem = std::filesystem::path(label).filename().string();
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  auto cache = std::make_shared<WeightCache>();
  cache->path_ = dir + "/" + stem + "-" + hex + ".hpk";
  cache->verify_ = verify;
  const std::string& path = cache->path_;

  HEARTH_ASSIGN_OR_RETURN(LockedFile f, lock_file(path));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Status::error(path + ": cannot stat");
  cache->dev_ = uint64_t(st.st_dev);
  cache->ino_ = uint64_t(st.st_ino);
  const std::vector<uint8_t> header = file_header(key, label);
  uint64_t size = uint64_t(st.st_size);
  bool header_ok = size >= header.size();
  if (header_ok) {
    std::vector<uint8_t> have(header.size());
    header_ok =
        ::pread(f.fd, have.data(), have.size(), 0) == ssize_t(have.size()) && have == header;
  }
  if (!header_ok) {
    sweep_stale(dir, path, key);  // a new file: the source or the kernels changed, or first use
    if (size > 0) {
      // Foreign or damaged: start a new inode, so a process still mapping the old file keeps
      // valid pages (truncating a mapped file would turn its reads into SIGBUS).
      ::unlink(path.c_str());
      HEARTH_ASSIGN_OR_RETURN(LockedFile fresh, lock_file(path));
      if (::fstat(fresh.fd, &st) != 0) return Status::error(path + ": cannot stat");
      cache->dev_ = uint64_t(st.st_dev);
      cache->ino_ = uint64_t(st.st_ino);
      HEARTH_TRY(write_all(fresh.fd, header.data(), header.size(), 0, path));
      return cache;
    }
    HEARTH_TRY(write_all(f.fd, header.data(), header.size(), 0, path));
    return cache;
  }
  HEARTH_ASSIGN_OR_RETURN(cache->map_, MappedFile::open(path));
  const uint8_t* base = cache->map_.data();
  size = cache->map_.size();
  uint64_t off = header.size();
  // Structure only: headers, names and slice tables (~0.01% of the bytes). Payloads are
  // checked by find(), as much as the verify mode asks.
  while (off + sizeof(RecordHeader) <= size) {
    RecordHeader rh;
    std::memcpy(&rh, base + off, sizeof rh);
    if ((rh.magic != kRecordMagic && rh.magic != kDeadMagic) || rh.name_len == 0 ||
        rh.name_len > 4096)
      break;
    const uint64_t name_at = off + sizeof rh;
    if (name_at + rh.name_len > size) break;
    const std::string name(reinterpret_cast<const char*>(base + name_at), rh.name_len);
    if (rh.check != record_check(name, rh.bytes, rh.table_hash)) break;
    if (rh.bytes > size) break;  // also bounds the layout arithmetic below
    const RecordLayout lay = layout_at(off, rh.name_len, rh.bytes);
    if (lay.payload > size || rh.bytes > size - lay.payload) break;
    const uint64_t slices = n_slices(rh.bytes);
    if (table_hash(reinterpret_cast<const uint64_t*>(base + lay.table), slices, rh.bytes) !=
        rh.table_hash)
      break;
    if (rh.magic == kRecordMagic)
      cache->entries_[name] = {off, lay.table, lay.payload, rh.bytes};
    else
      cache->entries_.erase(name);  // dead: a later record of this name (a repack) may follow
    off = std::min(size, lay.end);
  }
  if (off < size) {  // a torn or corrupt tail: cut it so appends start on a record boundary
    if (::ftruncate(f.fd, off_t(off)) != 0) return Status::error(path + ": cannot truncate");
    // Entries past `off` were never added, so the mapping stays valid for those kept.
  }
  return cache;
}

WeightCache::~WeightCache() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cancel_.store(true);
  pending_cv_.notify_all();
  if (verifier_.joinable()) verifier_.join();
}

bool WeightCache::check_slices(const Entry& e, bool all, ThreadPool* pool) const {
  const uint8_t* payload = map_.data() + e.payload_offset;
  const auto* table = reinterpret_cast<const uint64_t*>(map_.data() + e.table_offset);
  const uint64_t n = n_slices(e.bytes);
  all = all || n <= kSampleAllBelow;
  std::atomic<bool> ok{true};
  auto body = [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1 && ok.load(std::memory_order_relaxed); ++s) {
      // A closing cache stops its background pass within a slice, not a whole record.
      if (cancel_.load(std::memory_order_relaxed)) return;
      const uint64_t i = uint64_t(s);
      // Sampled: each record's first and last slice (where torn or zero-filled writes start
      // and end) and one slice in kSampleStride, at this process's phase.
      if (!all && i != 0 && i != n - 1 && (i + verify_.phase) % kSampleStride != 0) continue;
      uint64_t want;
      std::memcpy(&want, table + i, 8);
      if (slice_sum_at(payload, e.bytes, i) != want) ok.store(false);
    }
  };
  if (pool && (all ? n : n / kSampleStride) >= 16)
    pool->parallel_for(int64_t(n), all ? 16 : int64_t(kSampleStride), body);
  else
    body(0, int64_t(n));
  return ok.load();
}

// Overwrites the record's magic with 'DEAD' (its check does not cover the magic), so later
// opens skip it and repack. Only if the file is still the one mapped and still holds the
// record there: a replaced or truncated file is left alone.
void WeightCache::mark_dead(const Entry& e) {
  auto f = lock_file(path_);
  if (!f.is_ok()) return;
  struct stat st {};
  if (::fstat(f.value().fd, &st) != 0 || uint64_t(st.st_dev) != dev_ ||
      uint64_t(st.st_ino) != ino_ || uint64_t(st.st_size) < e.payload_offset + e.bytes)
    return;
  RecordHeader now{}, was{};
  std::memcpy(&was, map_.data() + e.header_offset, sizeof was);
  if (::pread(f.value().fd, &now, sizeof now, off_t(e.header_offset)) != ssize_t(sizeof now) ||
      std::memcmp(&now, &was, sizeof now) != 0 || now.magic != kRecordMagic)
    return;
  const uint32_t dead = kDeadMagic;
  (void)write_all(f.value().fd, &dead, sizeof dead, e.header_offset, path_);
}

const uint8_t* WeightCache::find(const std::string& name, uint64_t bytes, ThreadPool* pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = entries_.find(name);
  if (it == entries_.end() || it->second.bytes != bytes) return nullptr;
  const Entry e = it->second;
  // A payload that fails is never handed out: the caller repacks it and appends a new record,
  // which supersedes this one at the next open. Sampled checks also fault in pages the first
  // token would read anyway.
  if (!check_slices(e, verify_.mode == CacheVerify::Mode::kFull, pool)) {
    entries_.erase(it);
    return nullptr;
  }
  ++hits_;
  if (verify_.mode == CacheVerify::Mode::kLazy) {
    pending_.push_back(e);
    if (!verifier_.joinable()) verifier_ = std::thread([this] { background_loop(); });
    pending_cv_.notify_all();
  }
  return map_.data() + e.payload_offset;
}

// The lazy pass: every slice of every hit, at idle scheduling priority, so it runs only on
// cycles nobody else wants (during decode the pool's threads keep both cores busy; between
// requests it catches up). A failure cannot be undone for this process (its kernels already
// read the pointer); it is logged and the record marked dead so the next load repacks.
void WeightCache::background_loop() {
  sched_param prio{};
  (void)::sched_setscheduler(0, SCHED_IDLE, &prio);  // 0 = this thread on Linux
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    pending_cv_.wait(lock, [&] { return stop_ || pending_done_ < pending_.size(); });
    if (stop_) return;
    const Entry e = pending_[pending_done_];
    lock.unlock();
    const bool ok = check_slices(e, true, nullptr);
    if (cancel_.load()) return;  // cut short: its result means nothing
    if (!ok) {
      mark_dead(e);
      late_failures_.fetch_add(1);
      log_warn(path_ + ": a cached weight at offset " + std::to_string(e.payload_offset) +
               " failed its checksum after the load used it; it will be repacked at the next "
               "load (--cache-verify full checks every byte before use)");
    }
    lock.lock();
    ++pending_done_;
    pending_cv_.notify_all();
  }
}

void WeightCache::wait_background() {
  std::unique_lock<std::mutex> lock(mutex_);
  pending_cv_.wait(lock, [&] { return stop_ || pending_done_ == pending_.size(); });
}

int WeightCache::verify_all(ThreadPool* pool) {
  wait_background();
  std::vector<Entry> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [name, e] : entries_) all.push_back(e);
  }
  int failed = 0;
  for (const Entry& e : all) {
    if (check_slices(e, true, pool)) continue;
    ++failed;
    mark_dead(e);
  }
  // Whether or not this object handed them out, count them: the caller asked about the file.
  late_failures_.fetch_add(failed);
  return failed;
}

Status WeightCache::add(const std::string& name, const void* data, uint64_t bytes,
                        ThreadPool* pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++misses_;
  // Checksums come from the packed bytes in memory, the ones this load computes with: what
  // the file must reproduce.
  const auto* src = static_cast<const uint8_t*>(data);
  const uint64_t slices = n_slices(bytes);
  std::vector<uint64_t> table(slices);
  auto body = [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) table[size_t(s)] = slice_sum_at(src, bytes, uint64_t(s));
  };
  if (pool)
    pool->parallel_for(int64_t(slices), 64, body);
  else
    body(0, int64_t(slices));
  const uint64_t th = table_hash(table.data(), slices, bytes);
  HEARTH_ASSIGN_OR_RETURN(LockedFile f, lock_file(path_));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Status::error(path_ + ": cannot stat");
  const uint64_t off = align_up(uint64_t(st.st_size));
  const RecordHeader rh{kRecordMagic, uint32_t(name.size()), bytes, th,
                        record_check(name, bytes, th)};
  const RecordLayout lay = layout_at(off, uint32_t(name.size()), bytes);
  std::vector<uint8_t> head(sizeof rh + name.size());
  std::memcpy(head.data(), &rh, sizeof rh);
  std::memcpy(head.data() + sizeof rh, name.data(), name.size());
  // Payload and table first, header last: a crash mid-write leaves no valid-looking record.
  HEARTH_TRY(write_all(f.fd, data, bytes, lay.payload, path_));
  HEARTH_TRY(write_all(f.fd, table.data(), slices * 8, lay.table, path_));
  if (::ftruncate(f.fd, off_t(lay.end)) != 0) return Status::error(path_ + ": cannot extend");
  return write_all(f.fd, head.data(), head.size(), off, path_);
}

}  // namespace hearth
