// WeightCache: an append-only file of packed tensors, validated record by record at open.
// Writers hold an exclusive flock, so two processes loading the same model cannot interleave.
#include "backend/weight-cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

namespace hearth {

namespace {

constexpr char kMagic[8] = {'H', 'R', 'T', 'H', 'P', 'A', 'K', '1'};
constexpr uint32_t kFormat = 2;                // 2: the source path in the header
constexpr uint32_t kRecordMagic = 0x43455250;  // "PREC"
constexpr uint64_t kAlign = 64;

uint64_t align_up(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct RecordHeader {
  uint32_t magic;
  uint32_t name_len;
  uint64_t bytes;
  uint64_t payload_check;  // payload_checksum() of the payload
  uint64_t check;          // fnv1a over name, bytes and payload_check: torn or garbage headers
};

uint64_t record_check(const std::string& name, uint64_t bytes, uint64_t payload_check) {
  uint64_t h = fnv1a(name.data(), name.size());
  h = fnv1a(&bytes, sizeof bytes, h);
  return fnv1a(&payload_check, sizeof payload_check, h);
}

constexpr uint64_t kSlice = 1u << 20;  // checksum slices: the unit of parallel verification

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

// Removes cache files whose source is gone or changed (its identity no longer starts their
// key), and files of older formats, so the folder does not grow with every edited or temporary
// model. A process still mapping a removed file keeps its pages (unlink, not truncate).
void sweep_stale(const std::string& dir, const std::string& keep) {
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
        stale = !src.is_ok() || key.rfind(src.value().identity() + "|", 0) != 0;
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

Result<std::shared_ptr<WeightCache>> WeightCache::open(const std::string& dir,
                                                       const std::string& key,
                                                       const std::string& label) {
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
  const std::string& path = cache->path_;

  HEARTH_ASSIGN_OR_RETURN(LockedFile f, lock_file(path));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Status::error(path + ": cannot stat");
  const std::vector<uint8_t> header = file_header(key, label);
  uint64_t size = uint64_t(st.st_size);
  bool header_ok = size >= header.size();
  if (header_ok) {
    std::vector<uint8_t> have(header.size());
    header_ok =
        ::pread(f.fd, have.data(), have.size(), 0) == ssize_t(have.size()) && have == header;
  }
  if (!header_ok) {
    sweep_stale(dir, path);  // a new file: the source or the kernels changed, or first use
    if (size > 0) {
      // Foreign or damaged: start a new inode, so a process still mapping the old file keeps
      // valid pages (truncating a mapped file would turn its reads into SIGBUS).
      ::unlink(path.c_str());
      HEARTH_ASSIGN_OR_RETURN(LockedFile fresh, lock_file(path));
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
  while (off + sizeof(RecordHeader) <= size) {
    RecordHeader rh;
    std::memcpy(&rh, base + off, sizeof rh);
    if (rh.magic != kRecordMagic || rh.name_len == 0 || rh.name_len > 4096) break;
    const uint64_t name_at = off + sizeof rh;
    if (name_at + rh.name_len > size) break;
    const std::string name(reinterpret_cast<const char*>(base + name_at), rh.name_len);
    if (rh.check != record_check(name, rh.bytes, rh.payload_check)) break;
    const uint64_t payload = align_up(name_at + rh.name_len);
    if (rh.bytes > size || payload > size - rh.bytes) break;
    cache->entries_[name] = {payload, rh.bytes, rh.payload_check};
    off = align_up(payload + rh.bytes);
  }
  if (off < size) {  // a torn or corrupt tail: cut it so appends start on a record boundary
    if (::ftruncate(f.fd, off_t(off)) != 0) return Status::error(path + ": cannot truncate");
    // Entries past `off` were never added, so the mapping stays valid for those kept.
  }
  return cache;
}

uint64_t WeightCache::checksum(const uint8_t* p, uint64_t bytes, ThreadPool* pool) {
  const int64_t slices = int64_t((bytes + kSlice - 1) / kSlice);
  std::vector<uint64_t> sums(size_t(slices > 0 ? slices : 0));
  auto body = [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const uint64_t off = uint64_t(s) * kSlice;
      sums[size_t(s)] = slice_checksum(p + off, std::min(kSlice, bytes - off), uint64_t(s));
    }
  };
  if (pool)
    pool->parallel_for(slices, 4, body);
  else
    body(0, slices);
  return fnv1a(sums.data(), sums.size() * sizeof(uint64_t), bytes);
}

const uint8_t* WeightCache::find(const std::string& name, uint64_t bytes, ThreadPool* pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = entries_.find(name);
  if (it == entries_.end() || it->second.bytes != bytes) return nullptr;
  const uint8_t* p = map_.data() + it->second.offset;
  // Verified at every load: a damaged payload costs a repack, never wrong logits. Reading the
  // bytes here also faults them in, which the first token would do anyway.
  if (checksum(p, bytes, pool) != it->second.check) return nullptr;
  ++hits_;
  return p;
}

Status WeightCache::add(const std::string& name, const void* data, uint64_t bytes,
                        ThreadPool* pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++misses_;
  const uint64_t payload_check = checksum(static_cast<const uint8_t*>(data), bytes, pool);
  HEARTH_ASSIGN_OR_RETURN(LockedFile f, lock_file(path_));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Status::error(path_ + ": cannot stat");
  const uint64_t off = align_up(uint64_t(st.st_size));
  const RecordHeader rh{kRecordMagic, uint32_t(name.size()), bytes, payload_check,
                        record_check(name, bytes, payload_check)};
  std::vector<uint8_t> head(align_up(sizeof rh + name.size()), 0);
  std::memcpy(head.data(), &rh, sizeof rh);
  std::memcpy(head.data() + sizeof rh, name.data(), name.size());
  // Payload first, header last: a crash mid-write leaves no valid-looking record behind.
  HEARTH_TRY(write_all(f.fd, data, bytes, off + head.size(), path_));
  const uint64_t end = align_up(off + head.size() + bytes);
  if (::ftruncate(f.fd, off_t(end)) != 0) return Status::error(path_ + ": cannot extend");
  return write_all(f.fd, head.data(), head.size(), off, path_);
}

}  // namespace hearth
