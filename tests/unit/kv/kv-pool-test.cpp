// KvPool (kv/kv-pool.h) and pooled KvCaches on the CPU backend: block accounting, the block size
// rule, ensure/release_unused taking and returning blocks, a full pool refusing (all or nothing),
// pages really committed, parked and given back (mincore), and pooled rows that read back as
// written.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu-backend.h"
#include "base/reserved-memory.h"
#include "kv/kv-cache.h"
#include "kv/kv-pool.h"

namespace hearth {
namespace {

const KvCacheTypes kF32{DType::F32, DType::F32};

// Pages of [p, p + bytes) resident in memory now.
float* rows(void* p) {
  return static_cast<float*>(p);
}

int64_t resident_pages(const void* p, uint64_t bytes) {
  const uint64_t page = host_page_size();
  const uint64_t n = (bytes + page - 1) / page;
  std::vector<unsigned char> v(size_t(n), 0);
  if (mincore(const_cast<void*>(p), size_t(n * page), v.data()) != 0) return -1;
  int64_t count = 0;
  for (unsigned char c : v) count += c & 1;
  return count;
}

TEST(KvPoolTest, CountsBlocksAndRefusesBeyondTheTotal) {
  auto pool = KvPool::create(100, 16);  // 7 blocks (100 tokens round up)
  EXPECT_EQ(pool->total_blocks(), 7);
  EXPECT_EQ(pool->blocks_for(0), 0);
  EXPECT_EQ(pool->blocks_for(16), 1);
  EXPECT_EQ(pool->blocks_for(17), 2);
  EXPECT_TRUE(pool->try_take(5));
  EXPECT_FALSE(pool->try_take(3));  // all or nothing
  EXPECT_EQ(pool->used_blocks(), 5);
  EXPECT_TRUE(pool->try_take(2));
  EXPECT_EQ(pool->free_blocks(), 0);
  pool->give(7);
  EXPECT_EQ(pool->free_blocks(), 7);
  EXPECT_TRUE(pool->bounded());
  EXPECT_FALSE(KvPool::unbounded(16)->bounded());
}

TEST(KvPoolTest, ConcurrentTakesNeverOvercommit) {
  auto pool = KvPool::create(1000 * 16, 16);
  std::vector<std::thread> threads;
  std::atomic<int64_t> taken{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i)
        if (pool->try_take(1)) taken++;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(taken.load(), 1000);
  EXPECT_EQ(pool->used_blocks(), 1000);
}

TEST(KvPoolTest, BlockRowsFitAGranuleInEveryBuffer) {
  // 4 KiB pages, 512-byte rows: 8 tokens fill a page; the floor is 16.
  const KvPool::Buffer small[] = {{4096, 512}, {4096, 512}};
  EXPECT_EQ(KvPool::block_tokens_for(small), 16);
  // 2 MiB granules, 8 KiB rows (a 7B f16 cache): 256 tokens fill one exactly.
  const KvPool::Buffer gpu[] = {{2u << 20, 8192}, {2u << 20, 8192}};
  EXPECT_EQ(KvPool::block_tokens_for(gpu), 256);
  // q8_0 rows of 4352 bytes (a 7B q8_0 cache): 481 fit in 2 MiB, so 480 (496, rounded up,
  // would be two granules a buffer).
  const KvPool::Buffer q8[] = {{2u << 20, 4352}};
  EXPECT_EQ(KvPool::block_tokens_for(q8), 480);
  // Mixed rows (f16 K, q8_0 V): the block fits the larger rows' granule.
  const KvPool::Buffer mixed[] = {{2u << 20, 8192}, {2u << 20, 4352}};
  EXPECT_EQ(KvPool::block_tokens_for(mixed), 256);
  // A buffer that pages nothing does not set the size.
  const KvPool::Buffer eager[] = {{0, 8}};
  EXPECT_EQ(KvPool::block_tokens_for(eager), 16);
  const KvPool::Buffer some_eager[] = {{0, 8}, {2u << 20, 8192}};
  EXPECT_EQ(KvPool::block_tokens_for(some_eager), 256);
}

class PooledKvCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  std::vector<Backend*> layers(int n) { return std::vector<Backend*>(size_t(n), cpu.get()); }
};

TEST_F(PooledKvCacheTest, EnsureTakesBlocksAndReleaseGivesThemBack) {
  auto pool = KvPool::create(64, 16);  // 4 blocks
  auto kv = KvCache::create(layers(2), 64, 32, {}, 0, kF32, pool);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  EXPECT_EQ(kv->held_blocks(), 0);
  EXPECT_EQ(kv->committed_bytes(), 0u);
  ASSERT_TRUE(kv->ensure(17).is_ok());
  EXPECT_EQ(kv->held_blocks(), 2);
  EXPECT_EQ(pool->used_blocks(), 2);
  EXPECT_GT(kv->committed_bytes(), 0u);
  ASSERT_TRUE(kv->ensure(5).is_ok());  // already held
  EXPECT_EQ(pool->used_blocks(), 2);
  // A second cache finds two blocks left: three are refused, nothing taken.
  auto other = KvCache::create(layers(2), 64, 32, {}, 0, kF32, pool);
  ASSERT_TRUE(other.is_ok());
  const Status full = other->ensure(40);
  EXPECT_FALSE(full.is_ok());
  EXPECT_NE(full.message().find("KV pool is full"), std::string::npos) << full.message();
  EXPECT_EQ(pool->used_blocks(), 2);
  ASSERT_TRUE(other->ensure(32).is_ok());
  EXPECT_EQ(pool->free_blocks(), 0);
  // Truncation keeps the blocks until release_unused.
  kv->set_used(17);
  kv->set_used(3);
  EXPECT_EQ(kv->held_blocks(), 2);
  kv->release_unused();
  EXPECT_EQ(kv->held_blocks(), 1);
  EXPECT_EQ(pool->free_blocks(), 1);
  EXPECT_FALSE(kv->ensure(65).is_ok());  // beyond capacity, whatever the pool holds
  // Moves keep the blocks with the cache; destruction returns them.
  KvCache moved = std::move(*other);
  EXPECT_EQ(moved.held_blocks(), 2);
  EXPECT_EQ(pool->used_blocks(), 3);
  moved = KvCache();
  kv = Status::error("dropped");
  EXPECT_EQ(pool->used_blocks(), 0);
}

TEST_F(PooledKvCacheTest, CommittedPagesAreResidentAndDecommittedOnesAreNot) {
  const uint64_t page = host_page_size();
  const int64_t dim = int64_t(page / 4);  // one f32 row per page
  auto pool = KvPool::unbounded(16);
  auto kv = KvCache::create(layers(1), 1024, dim, {}, 0, kF32, pool);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  float* k = rows(kv->k_data(0));
  const uint64_t reserved = kv->bytes() / 2;  // K's range (V is the same size)
  EXPECT_EQ(resident_pages(k, reserved), 0);
  ASSERT_TRUE(kv->ensure(64).is_ok());
  for (int64_t p = 0; p < 64; ++p) k[p * dim] = float(p);  // touch each row
  const int64_t touched = resident_pages(k, reserved);
  EXPECT_GE(touched, 64);
  EXPECT_LE(touched, 64 + 1);
  kv->set_used(16);
  kv->release_unused();
  // The given-back pages stay parked (resident) for the next commit until the backend
  // releases them (a server going idle).
  EXPECT_GE(resident_pages(k, reserved), 64);
  cpu->release_parked_kv();
  EXPECT_LE(resident_pages(k, reserved), 16 + 1);  // the pages went back to the kernel
  EXPECT_EQ(k[15 * dim], 15.0f);                   // the kept prefix is intact
  // Recommitted pages read back what is written again.
  ASSERT_TRUE(kv->ensure(64).is_ok());
  k[40 * dim] = 4.5f;
  EXPECT_EQ(k[40 * dim], 4.5f);
}

TEST_F(PooledKvCacheTest, ParkedPagesServeTheNextCommitAndStayUnderTheLimit) {
  const uint64_t page = host_page_size();
  const int64_t dim = int64_t(page / 4);  // one f32 row per page
  CpuBackendOptions opt;
  opt.kv_parked_limit = 40 * page;  // one buffer's 48 given-back pages do not fit
  auto small = make_cpu_backend(opt);
  auto pool = KvPool::unbounded(16);
  auto kv = KvCache::create({small.get()}, 1024, dim, {}, 0, kF32, pool);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  float* k = rows(kv->k_data(0));
  float* v = rows(kv->v_data(0));
  const uint64_t reserved = kv->bytes() / 2;
  // Grow, give back 32 pages a buffer (64 parked, over the limit: the older buffer's go back),
  // grow again over the same rows.
  ASSERT_TRUE(kv->ensure(64).is_ok());
  for (int64_t p = 0; p < 64; ++p) k[p * dim] = v[p * dim] = float(p);
  kv->set_used(32);
  kv->release_unused();
  EXPECT_LE(resident_pages(k, reserved) + resident_pages(v, reserved), 64 + 32 + 2);
  EXPECT_EQ(kv->committed_bytes(), 2 * 32 * page);
  ASSERT_TRUE(kv->ensure(64).is_ok());
  for (int64_t p = 32; p < 64; ++p) k[p * dim] = v[p * dim] = -float(p);
  for (int64_t p = 0; p < 64; ++p) {
    ASSERT_EQ(k[p * dim], p < 32 ? float(p) : -float(p));
    ASSERT_EQ(v[p * dim], p < 32 ? float(p) : -float(p));
  }
  // Given back while parked pages lie past it, then destroyed: nothing stays behind.
  kv->set_used(0);
  kv->release_unused();
  EXPECT_EQ(kv->committed_bytes(), 0u);
  kv = Status::error("dropped");
  small->release_parked_kv();
}

TEST_F(PooledKvCacheTest, ABlockCommitsItsOwnGranulesOnly) {
  // Rows of a quarter page, blocks of 16 rows: a block is 4 pages a buffer, and committing it
  // must not take a fifth page for a row of slack (on CUDA that is a second 2 MiB granule per
  // buffer: a one-block request's cache doubled).
  const uint64_t page = host_page_size();
  const int64_t dim = int64_t(page / 16);  // f32 rows of page / 4 bytes
  const int64_t block = int64_t(
      KvPool::block_tokens_for(std::vector<KvPool::Buffer>{{page, page / 4}, {page, page / 4}}));
  ASSERT_EQ(block, 16);
  auto pool = KvPool::unbounded(block);
  auto kv = KvCache::create(layers(1), 4 * block, dim, {}, 0, kF32, pool);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  ASSERT_TRUE(kv->ensure(block).is_ok());
  EXPECT_EQ(kv->held_blocks(), 1);
  EXPECT_EQ(kv->committed_bytes(), 2 * 4 * page);  // K and V: four pages each
  ASSERT_TRUE(kv->ensure(block + 1).is_ok());
  EXPECT_EQ(kv->committed_bytes(), 2 * 8 * page);
}

TEST_F(PooledKvCacheTest, AOneBlockQ8CacheCommitsOneGranuleABuffer) {
  // q8_0 rows that do not divide a page (64 values: 68 bytes): a block is the most multiple of
  // 16 rows one page holds, so a one-block cache holds one page a buffer, as an f16 one of the
  // same rows' page would, not two.
  const uint64_t page = host_page_size();
  const int64_t dim = 64;
  const uint64_t row = 68;
  const int64_t block =
      KvPool::block_tokens_for(std::vector<KvPool::Buffer>{{page, row}, {page, row}});
  ASSERT_EQ(block % 16, 0);
  ASSERT_LE(uint64_t(block) * row, page);
  ASSERT_GT(uint64_t(block + 16) * row, page);
  auto pool = KvPool::unbounded(block);
  const KvCacheTypes q8{DType::Q8_0, DType::Q8_0};
  auto kv = KvCache::create(layers(1), 4 * block, dim, {}, 0, q8, pool);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  ASSERT_TRUE(kv->ensure(block).is_ok());
  EXPECT_EQ(kv->held_blocks(), 1);
  EXPECT_EQ(kv->committed_bytes(), 2 * page);  // K and V: one page each
  ASSERT_TRUE(kv->ensure(3 * block).is_ok());
  EXPECT_LE(kv->committed_bytes(), 2 * 3 * page);
}

TEST_F(PooledKvCacheTest, PooledRowsCopySaveAndRestoreAsEagerOnes) {
  const int64_t dim = 8, n = 40;
  auto pool = KvPool::create(128, 16);
  auto eager = KvCache::create(layers(2), 64, dim, {}, 0, kF32);
  auto pooled = KvCache::create(layers(2), 64, dim, {}, 0, kF32, pool);
  ASSERT_TRUE(eager.is_ok() && pooled.is_ok());
  ASSERT_TRUE(pooled->ensure(n).is_ok());
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < n * dim; ++i) {
      rows(eager->k_data(l))[i] = rows(pooled->k_data(l))[i] = float(l * 1000 + i);
      rows(eager->v_data(l))[i] = rows(pooled->v_data(l))[i] = float(-i);
    }
  eager->set_used(n);
  pooled->set_used(n);
  std::vector<uint8_t> a, b;
  ASSERT_TRUE(eager->save(n, &a).is_ok());
  ASSERT_TRUE(pooled->save(n, &b).is_ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(pooled->saved_bytes(n), eager->saved_bytes(n));
  // A copy into a fresh pooled cache commits its blocks first.
  auto copy = KvCache::create(layers(2), 64, dim, {}, 0, kF32, pool);
  ASSERT_TRUE(copy->copy_prefix_from(*pooled, n).is_ok());
  EXPECT_EQ(copy->held_blocks(), 3);
  std::vector<uint8_t> c;
  ASSERT_TRUE(copy->save(n, &c).is_ok());
  EXPECT_EQ(a, c);
  auto restored = KvCache::create(layers(2), 64, dim, {}, 0, kF32, pool);
  EXPECT_FALSE(restored->restore(a, n).is_ok());  // 3 more blocks do not fit (2 left)
  copy = Status::error("dropped");
  ASSERT_TRUE(restored->restore(a, n).is_ok());
  std::vector<uint8_t> d;
  ASSERT_TRUE(restored->save(n, &d).is_ok());
  EXPECT_EQ(a, d);
}

TEST_F(PooledKvCacheTest, RingLayersAreCommittedWholeOutsideTheBlocks) {
  auto pool = KvPool::create(64, 16);
  auto kv = KvCache::create(layers(2), 1024, 4, {0, 32}, 8, kF32, pool);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  EXPECT_EQ(kv->ring_rows(1), 40);
  EXPECT_GE(kv->ring_bytes(), uint64_t(40 * 4 * 8));
  EXPECT_EQ(kv->committed_bytes(), kv->ring_bytes());
  EXPECT_EQ(pool->used_blocks(), 0);
  // The ring is usable without ensure; the full layer after it.
  rows(kv->k_data(1))[39 * 4] = 1.0f;
  ASSERT_TRUE(kv->ensure(20).is_ok());
  EXPECT_EQ(pool->used_blocks(), 2);
}

}  // namespace
}  // namespace hearth
