// The prepacked-weight cache (backend/weight-cache.h): hits and misses, keys that must not
// match (another ISA or layout, a touched source), damaged files rebuilt without a crash, what
// each verify mode (full, sampled, lazy) catches and when, and whole-model loads whose logits
// must be bit-identical with the cache cold, warm and off, without the packed source's pages
// left in the process (MappedFile::release_pages).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "backend/weight-cache.h"
#include "base/mapped-file.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "support/test-data.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 31 + seed);
  return v;
}

// A real source file (the cache sweeps files whose source is gone) and its identity.
struct Source {
  std::string path, identity;
};
Source make_source(const std::string& dir, const std::string& name) {
  fs::create_directories(dir);
  Source s{dir + "/" + name, ""};
  std::ofstream(s.path) << "weights of " << name;
  s.identity = MappedFile::open(s.path).value().identity();
  return s;
}

// Resident bytes ("Rss:" in /proc/self/smaps) of this process's mappings of `path`.
uint64_t resident_bytes_of(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool ours = false;
  uint64_t kb = 0;
  while (std::getline(smaps, line)) {
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (first.find('-') != std::string::npos && first.find(':') == std::string::npos) {
      std::string perms, offset, dev, inode, name;
      fields >> perms >> offset >> dev >> inode >> name;
      ours = name == path;  // a mapping's header line
    } else if (ours && first == "Rss:") {
      uint64_t v = 0;
      fields >> v;
      kb += v;
    }
  }
  return kb * 1024;
}

std::shared_ptr<WeightCache> open_ok(const std::string& dir, const std::string& key,
                                     const std::string& source) {
  auto c = WeightCache::open(dir, key, source);
  EXPECT_TRUE(c.is_ok()) << c.message();
  return c.is_ok() ? c.value() : nullptr;
}

TEST(WeightCache, MissThenHitAfterReopen) {
  const std::string dir = test::temp_dir() + "/miss-hit";
  const Source src = make_source(test::temp_dir() + "/models", "miss-hit.gguf");
  const std::string key = weight_cache_key(src.identity, "avx512:2v1", 1);
  const auto a = pattern(1000, 1), b = pattern(4096, 2);
  {
    auto c = open_ok(dir, key, src.path);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->find("blk.0.attn_q.weight", a.size()), nullptr);
    ASSERT_TRUE(c->add("blk.0.attn_q.weight", a.data(), a.size()).is_ok());
    ASSERT_TRUE(c->add("blk.0.attn_k.weight", b.data(), b.size()).is_ok());
    EXPECT_EQ(c->misses(), 2);
  }
  auto c = open_ok(dir, key, src.path);
  ASSERT_TRUE(c);
  const uint8_t* pa = c->find("blk.0.attn_q.weight", a.size());
  const uint8_t* pb = c->find("blk.0.attn_k.weight", b.size());
  ASSERT_NE(pa, nullptr);
  ASSERT_NE(pb, nullptr);
  EXPECT_EQ(uintptr_t(pa) % 64, 0u);
  EXPECT_EQ(uintptr_t(pb) % 64, 0u);
  EXPECT_EQ(0, std::memcmp(pa, a.data(), a.size()));
  EXPECT_EQ(0, std::memcmp(pb, b.data(), b.size()));
  EXPECT_EQ(c->find("blk.0.attn_q.weight", a.size() + 1), nullptr) << "size must match too";
  EXPECT_EQ(c->find("blk.1.attn_q.weight", a.size()), nullptr);
  EXPECT_EQ(c->hits(), 2);
}

TEST(WeightCache, OtherIsaLayoutOrSourceMisses) {
  const std::string dir = test::temp_dir() + "/keys";
  const Source src = make_source(test::temp_dir() + "/models", "keys.gguf");
  const auto a = pattern(256, 3);
  const std::string base = weight_cache_key(src.identity, "avx512:2v1", 1);
  ASSERT_TRUE(open_ok(dir, base, src.path)->add("w", a.data(), a.size()).is_ok());
  for (const std::string& other : {weight_cache_key(src.identity, "avx2", 1),
                                   weight_cache_key(src.identity + "9", "avx512:2v1", 1)}) {
    auto c = open_ok(dir, other, src.path);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->find("w", a.size()), nullptr) << other;
  }
  EXPECT_NE(open_ok(dir, base, src.path)->find("w", a.size()), nullptr);
  // Another layout version misses too (and supersedes base: SupersededLayoutsAreSwept).
  EXPECT_EQ(
      open_ok(dir, weight_cache_key(src.identity, "avx512:2v2", 1), src.path)->find("w", a.size()),
      nullptr);
}

// A new cache file removes the files of sources that were deleted or changed since.
TEST(WeightCache, StaleFilesAreSwept) {
  const std::string dir = test::temp_dir() + "/sweep";
  const std::string models = test::temp_dir() + "/sweep-models";
  const Source gone = make_source(models, "gone.gguf");
  const Source edited = make_source(models, "edited.gguf");
  const Source kept = make_source(models, "kept.gguf");
  const auto a = pattern(128, 9);
  std::map<std::string, std::string> files;
  for (const Source* s : {&gone, &edited, &kept}) {
    auto c = open_ok(dir, weight_cache_key(s->identity, "isa", 1), s->path);
    ASSERT_TRUE(c->add("w", a.data(), a.size()).is_ok());
    files[s->path] = c->path();
  }
  fs::remove(gone.path);
  fs::last_write_time(edited.path, fs::last_write_time(edited.path) + std::chrono::seconds(3));
  const Source fresh = make_source(models, "fresh.gguf");
  ASSERT_TRUE(open_ok(dir, weight_cache_key(fresh.identity, "isa", 1), fresh.path));
  EXPECT_FALSE(fs::exists(files[gone.path])) << "source deleted";
  EXPECT_FALSE(fs::exists(files[edited.path])) << "source changed";
  EXPECT_TRUE(fs::exists(files[kept.path])) << "source unchanged";
  EXPECT_NE(open_ok(dir, weight_cache_key(kept.identity, "isa", 1), kept.path)->find("w", a.size()),
            nullptr);
}

// A layout's new version (a hearth update) writes a new file for the same source and kernel
// table: the superseded one goes, another table's file (a folder shared with another CPU) stays.
TEST(WeightCache, SupersededLayoutsAreSwept) {
  const std::string dir = test::temp_dir() + "/superseded";
  const Source src = make_source(test::temp_dir() + "/superseded-models", "m.gguf");
  const Source other = make_source(test::temp_dir() + "/superseded-models", "other.gguf");
  const auto a = pattern(128, 3);
  auto write = [&](const Source& s, const std::string& isa) {
    auto c = open_ok(dir, weight_cache_key(s.identity, isa, 1), s.path);
    EXPECT_TRUE(c->add("w", a.data(), a.size()).is_ok());
    return c->path();
  };
  const std::string old_layout = write(src, "avx512:1v1:12v2");
  const std::string other_table = write(src, "avx2:1v1");
  const std::string other_source = write(other, "avx512:1v1:12v2");
  const std::string current = write(src, "avx512:1v1:12v3");
  EXPECT_FALSE(fs::exists(old_layout)) << "same source and table, older layout";
  EXPECT_TRUE(fs::exists(other_table)) << "another kernel table";
  EXPECT_TRUE(fs::exists(other_source)) << "another source";
  EXPECT_TRUE(fs::exists(current));
  // The other table's file is still served, and reopening the current one sweeps nothing.
  EXPECT_NE(
      open_ok(dir, weight_cache_key(src.identity, "avx2:1v1", 1), src.path)->find("w", a.size()),
      nullptr);
  EXPECT_NE(open_ok(dir, weight_cache_key(src.identity, "avx512:1v1:12v3", 1), src.path)
                ->find("w", a.size()),
            nullptr);
}

// Damage the file in several ways: every reopen must succeed, drop what is damaged, and accept
// new records that the next reopen finds.
TEST(WeightCache, DamagedFilesAreRebuiltNotTrusted) {
  const std::string dir = test::temp_dir() + "/damage";
  const Source src = make_source(test::temp_dir() + "/models", "damage.gguf");
  const std::string key = weight_cache_key(src.identity, "avx512:2v1", 1);
  const auto a = pattern(3000, 4), b = pattern(700, 5);
  auto fresh = [&] {
    fs::remove_all(dir);
    auto c = open_ok(dir, key, src.path);
    EXPECT_TRUE(c->add("a", a.data(), a.size()).is_ok());
    EXPECT_TRUE(c->add("b", b.data(), b.size()).is_ok());
    return c->path();
  };
  auto reopen_and_check = [&](bool a_kept, bool b_kept, const char* what) {
    auto c = open_ok(dir, key, src.path);
    ASSERT_TRUE(c) << what;
    EXPECT_EQ(c->find("a", a.size()) != nullptr, a_kept) << what;
    EXPECT_EQ(c->find("b", b.size()) != nullptr, b_kept) << what;
    if (!b_kept) {
      ASSERT_TRUE(c->add("b", b.data(), b.size()).is_ok()) << what;
    }
    auto again = open_ok(dir, key, src.path);
    ASSERT_TRUE(again) << what;
    const uint8_t* pb = again->find("b", b.size());
    ASSERT_NE(pb, nullptr) << what << ": rebuilt record not found";
    EXPECT_EQ(0, std::memcmp(pb, b.data(), b.size())) << what;
  };

  // Garbage over the file header: nothing is trusted.
  std::string path = fresh();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.write("garbage!", 8);
  }
  reopen_and_check(false, false, "bad header");

  // Torn write: the file ends inside the last payload.
  path = fresh();
  fs::resize_file(path, fs::file_size(path) - 100);
  reopen_and_check(true, false, "truncated payload");

  // A record header whose check does not match (a bit flip in its size field).
  path = fresh();
  {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    // The second record starts after the header and record a, at a 64-byte boundary: find it.
    size_t at = 0;
    for (size_t i = 64; i + 4 <= bytes.size(); i += 64)
      if (std::memcmp(&bytes[i], "PREC", 4) == 0) at = i;
    ASSERT_GT(at, 0u);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(at + 8));
    const char flip = char(bytes[at + 8] ^ 0x10);
    f.write(&flip, 1);
  }
  reopen_and_check(true, false, "flipped record size");

  // A flipped bit inside b's payload (the last bytes of the file are b's payload or padding).
  path = fresh();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = std::streamoff(fs::file_size(path) - 64 - 100);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x04);
    f.seekp(at);
    f.write(&c, 1);
  }
  reopen_and_check(true, false, "flipped payload bit");

  // An empty file (e.g. a crash right after create).
  path = fresh();
  fs::resize_file(path, 0);
  reopen_and_check(false, false, "empty file");
}

// A record large enough to be sampled (more than kSampleAllBelow slices), with one byte of
// slice `slice` flipped on disk. Returns the cache file's path.
struct BigRecord {
  std::string dir, key, source, path;
  std::vector<uint8_t> data;
};
constexpr uint64_t kBigSlices = 40;
static_assert(kBigSlices > WeightCache::kSampleAllBelow);

BigRecord write_big(const std::string& name) {
  BigRecord r;
  r.dir = test::temp_dir() + "/" + name;
  fs::remove_all(r.dir);
  const Source src = make_source(test::temp_dir() + "/models", name + ".gguf");
  r.key = weight_cache_key(src.identity, "avx512:2v1", 1);
  r.source = src.path;
  r.data = pattern(size_t(kBigSlices * WeightCache::kSliceBytes - 1000), 6);
  CacheVerify v;
  auto c = WeightCache::open(r.dir, r.key, r.source, v);
  EXPECT_TRUE(c.is_ok());
  EXPECT_TRUE(c.value()->add("big", r.data.data(), r.data.size()).is_ok());
  r.path = c.value()->path();
  return r;
}

// Flips one byte of payload slice `slice` (the payload is the file's last bytes, 64-aligned).
void flip_slice(const BigRecord& r, uint64_t slice) {
  const uint64_t end = fs::file_size(r.path);
  const uint64_t payload = end - (r.data.size() + 63) / 64 * 64;
  const auto at = std::streamoff(payload + slice * WeightCache::kSliceBytes + 123);
  std::fstream f(r.path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x40);
  f.seekp(at);
  f.write(&c, 1);
}

std::shared_ptr<WeightCache> open_mode(const BigRecord& r, CacheVerify::Mode mode, uint32_t phase) {
  CacheVerify v;
  v.mode = mode;
  v.phase = phase;
  auto c = WeightCache::open(r.dir, r.key, r.source, v);
  EXPECT_TRUE(c.is_ok()) << c.message();
  return c.is_ok() ? c.value() : nullptr;
}

TEST(WeightCacheVerify, IntactRecordPassesEveryMode) {
  const BigRecord r = write_big("verify-intact");
  for (auto mode :
       {CacheVerify::Mode::kFull, CacheVerify::Mode::kSample, CacheVerify::Mode::kLazy}) {
    auto c = open_mode(r, mode, 7);
    const uint8_t* p = c->find("big", r.data.size());
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(0, std::memcmp(p, r.data.data(), r.data.size()));
    c->wait_background();
    EXPECT_EQ(c->late_failures(), 0);
    EXPECT_EQ(c->verify_all(), 0);
  }
}

// Full verification catches a flip in any slice before the pointer is handed out.
TEST(WeightCacheVerify, FullCatchesAnySlice) {
  for (uint64_t slice : {uint64_t(0), uint64_t(13), kBigSlices - 1}) {
    const BigRecord r = write_big("verify-full");
    flip_slice(r, slice);
    EXPECT_EQ(open_mode(r, CacheVerify::Mode::kFull, 0)->find("big", r.data.size()), nullptr)
        << "slice " << slice;
  }
}

// A sampled load always reads each record's first and last slice, and one slice in
// kSampleStride at its phase: over kSampleStride loads (phases) every slice is read once.
TEST(WeightCacheVerify, SampleReadsEndsAlwaysAndEachSliceAtOnePhase) {
  for (uint64_t slice : {uint64_t(0), kBigSlices - 1}) {
    const BigRecord r = write_big("verify-ends");
    flip_slice(r, slice);
    for (uint32_t phase : {1u, 30u})
      EXPECT_EQ(open_mode(r, CacheVerify::Mode::kSample, phase)->find("big", r.data.size()),
                nullptr)
          << "slice " << slice << " phase " << phase;
  }
  const uint64_t mid = 13;
  const BigRecord r = write_big("verify-mid");
  flip_slice(r, mid);
  int caught = 0;
  for (uint32_t phase = 0; phase < WeightCache::kSampleStride; ++phase) {
    const bool hit = open_mode(r, CacheVerify::Mode::kSample, phase)->find("big", r.data.size());
    const bool sampled = (mid + phase) % WeightCache::kSampleStride == 0;
    EXPECT_EQ(hit, !sampled) << "phase " << phase;
    caught += !hit;
  }
  EXPECT_EQ(caught, 1) << "exactly one phase reads slice " << mid;
}

// Lazy: a flip the sample skipped is handed out, then caught by the background pass, which
// marks the record dead so the next load (any mode) repacks instead of trusting it.
TEST(WeightCacheVerify, LazyCatchesSkippedSliceAfterLoadAndNextLoadRepacks) {
  const BigRecord r = write_big("verify-lazy");
  flip_slice(r, 13);
  {
    auto c = open_mode(r, CacheVerify::Mode::kLazy, 0);  // phase 0 skips slice 13
    EXPECT_NE(c->find("big", r.data.size()), nullptr) << "the sample must not read slice 13";
    c->wait_background();
    EXPECT_EQ(c->late_failures(), 1);
  }
  {
    auto c = open_mode(r, CacheVerify::Mode::kSample, 0);
    EXPECT_EQ(c->find("big", r.data.size()), nullptr) << "a dead record must not be found";
    ASSERT_TRUE(c->add("big", r.data.data(), r.data.size()).is_ok());
  }
  auto c = open_mode(r, CacheVerify::Mode::kFull, 0);
  const uint8_t* p = c->find("big", r.data.size());
  ASSERT_NE(p, nullptr) << "the repacked record supersedes the dead one";
  EXPECT_EQ(0, std::memcmp(p, r.data.data(), r.data.size()));
}

// On demand: verify_all reads every slice of every record, whatever the load sampled.
TEST(WeightCacheVerify, VerifyAllOnDemandMarksDead) {
  const BigRecord r = write_big("verify-all");
  flip_slice(r, 13);
  {
    auto c = open_mode(r, CacheVerify::Mode::kSample, 0);
    EXPECT_NE(c->find("big", r.data.size()), nullptr);
    EXPECT_EQ(c->verify_all(), 1);
  }
  EXPECT_EQ(open_mode(r, CacheVerify::Mode::kSample, 0)->find("big", r.data.size()), nullptr);
}

// The slice table is covered by the checked record header: damage there cuts the record at
// open, in every mode, without reading a payload byte.
TEST(WeightCacheVerify, DamagedSliceTableDropsTheRecord) {
  const BigRecord r = write_big("verify-table");
  {
    std::ifstream in(r.path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    size_t at = 0;
    for (size_t i = 64; i + 4 <= bytes.size(); i += 64)
      if (std::memcmp(&bytes[i], "PREC", 4) == 0) at = i;
    ASSERT_GT(at, 0u);
    // The table starts at the first 64-byte boundary after the 32-byte header and "big".
    std::fstream f(r.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(at + 64 + 8 * 5));
    f.write("\x55", 1);
  }
  for (auto mode : {CacheVerify::Mode::kFull, CacheVerify::Mode::kSample, CacheVerify::Mode::kLazy})
    EXPECT_EQ(open_mode(r, mode, 0)->find("big", r.data.size()), nullptr);
}

TEST(WeightCache, UnwritableFolderIsAnErrorNotACrash) {
  const std::string blocker = test::temp_dir() + "/not-a-dir";
  std::ofstream(blocker) << "x";
  auto c = WeightCache::open(blocker + "/sub", "k", "m.gguf");
  EXPECT_FALSE(c.is_ok());
}

// release_pages drops a mapped file's pages from the process and nothing else: the bytes read
// back the same (faulted in again), and memory outside a mapping, or a range past its end, is
// left alone.
TEST(MappedFilePages, ReleaseDropsOnlyMappedPagesAndTheBytesReadBack) {
  const std::string path = test::temp_dir() + "/release-pages.bin";
  constexpr size_t kMiB = 1u << 20;
  const auto bytes = pattern(8 * kMiB, 7);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  const MappedFile f = MappedFile::open(path).value();
  ASSERT_EQ(f.size(), bytes.size());
  EXPECT_EQ(std::memcmp(f.data(), bytes.data(), bytes.size()), 0);
  const uint64_t all = resident_bytes_of(path);
  EXPECT_GE(all, 8 * kMiB - 64 * 1024);

  MappedFile::release_pages(f.data() + 2 * kMiB, 4 * kMiB);
  EXPECT_LE(resident_bytes_of(path), all - 4 * kMiB + 64 * 1024);
  // A range that runs past the mapping is not the mapping's: nothing is dropped.
  const uint64_t now = resident_bytes_of(path);
  MappedFile::release_pages(f.data() + f.size() - 4096, 8192);
  EXPECT_EQ(resident_bytes_of(path), now);

  EXPECT_EQ(std::memcmp(f.data(), bytes.data(), bytes.size()), 0) << "bytes after release";
  EXPECT_GE(resident_bytes_of(path), 8 * kMiB - 64 * 1024);

  // Heap memory is never a mapping's: its contents stay.
  std::vector<uint8_t> heap = pattern(2 * kMiB, 9);
  MappedFile::release_pages(heap.data(), heap.size());
  EXPECT_EQ(heap, pattern(2 * kMiB, 9));
}

// Whole-model loads: logits must be identical with the cache cold (pack + write), warm (mapped),
// off, after the source is touched (new key, rebuilt) and after the cache file is damaged.
class ModelCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir() + "/model-cache";
    cache_dir_ = dir_ + "/packed";
    fs::create_directories(dir_);
    model_ = dir_ + "/kjv-13m-q4_0.gguf";
    fs::copy_file(test::shared_path("goldens/kjv-13m/kjv-13m-q4_0.gguf"), model_,
                  fs::copy_options::overwrite_existing);
    setenv("HEARTH_CACHE_DIR", cache_dir_.c_str(), 1);
  }
  void TearDown() override { unsetenv("HEARTH_CACHE_DIR"); }

  // The logits of a fixed prompt; *resident: the model file's bytes still in this process
  // after the load and the prompt (the packed matrices' source pages are dropped).
  std::vector<float> logits(bool use_cache, CacheVerify::Mode verify = CpuOptions{}.cache_verify,
                            uint64_t* resident = nullptr) {
    LoadOptions opt;
    opt.n_threads = 2;
    opt.use_weight_cache = use_cache;
    opt.cpu.cache_verify = verify;
    auto m = load_model(model_, opt);
    EXPECT_TRUE(m.is_ok()) << m.message();
    if (!m.is_ok()) return {};
    auto kv = (*m)->new_kv_cache(32);
    EXPECT_TRUE(kv.is_ok());
    ForwardScratch scratch;
    std::vector<float> out;
    EXPECT_TRUE((*m)->prefill(*kv, {1, 450, 3186, 310, 278, 1095, 29892, 7339}, scratch, &out, true)
                    .is_ok());
    if (resident) *resident = resident_bytes_of(model_);
    return out;
  }
  std::vector<std::string> cache_files() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_dir_, ec)) out.push_back(e.path().string());
    return out;
  }

  std::string dir_, cache_dir_, model_;
};

TEST_F(ModelCacheTest, LogitsIdenticalColdWarmOffTouchedAndCorrupt) {
  const bool packs = kernels::packed_size(DType::Q4_0, 256, 256).has_value();
  const std::vector<float> off = logits(false);
  ASSERT_FALSE(off.empty());
  EXPECT_TRUE(cache_files().empty()) << "--no-cache must not write a cache";

  uint64_t resident = 0;
  EXPECT_EQ(logits(true, CpuOptions{}.cache_verify, &resident), off)
      << "cold cache (packed in memory, written to disk)";
  const auto files = cache_files();
  if (!packs) {  // this ISA has no packed layout: nothing to cache
    EXPECT_TRUE(files.empty());
    return;
  }
  // Every matrix of kjv-13m is packed (its tied LM head from the embedding table's bytes): what
  // stays is the metadata (the vocabulary), the norms and the embedding rows the prompt read,
  // each touched region a 2 MiB page where the file is mapped with huge pages. Before the
  // source pages were dropped, a cold load held the whole file.
  const uint64_t file_bytes = fs::file_size(model_);
  EXPECT_LT(resident, file_bytes / 2) << "a cold load kept the packed source's pages";
  ASSERT_EQ(files.size(), 1u);
  const auto size = fs::file_size(files[0]);
  EXPECT_GT(size, 1000u);

  EXPECT_EQ(logits(true, CpuOptions{}.cache_verify, &resident), off) << "warm cache (mapped)";
  EXPECT_LT(resident, file_bytes / 2) << "a warm load read the source's matrices";
  EXPECT_EQ(fs::file_size(files[0]), size) << "a warm load must not append";

  // Touching the source changes its identity: a new cache file is built, the stale one swept.
  fs::last_write_time(model_, fs::last_write_time(model_) + std::chrono::seconds(5));
  EXPECT_EQ(logits(true), off) << "touched source";
  const auto rebuilt = cache_files();
  ASSERT_EQ(rebuilt.size(), 1u);
  EXPECT_NE(rebuilt[0], files[0]);
  EXPECT_GT(fs::file_size(rebuilt[0]), 1000u);

  // Damage every cache file mid-payload and tear its tail. With full verification the next
  // load drops what is damaged and repacks, so the logits stay identical. (The default lazy
  // mode may hand out a damaged slice its sample skipped; the file tests below pin down when.)
  for (const std::string& f : cache_files()) {
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(std::streamoff(fs::file_size(f) / 2));
    s.write("\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    fs::resize_file(f, fs::file_size(f) - 77);
  }
  EXPECT_EQ(logits(true, CacheVerify::Mode::kFull), off) << "damaged cache";
  EXPECT_EQ(logits(true), off) << "after the rebuild (default lazy mode)";
}

}  // namespace
}  // namespace hearth
