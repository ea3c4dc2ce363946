// Paged KV memory on the CUDA backend (backend/cuda/cuda-kv-memory.h, Backend::reserve_kv):
// granules committed into a reserved range hold what is written, a decommitted granule can be
// committed again and written anew while the rest keeps its rows, a reservation costs no device
// memory until committed; and a pooled KvCache on the GPU (its blocks committed between chained
// decode steps, the recorded step replayed over the same addresses) gives the eager cache's
// greedy tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "backend/cuda/cuda-kv-memory.h"
#include "cuda-test-util.h"
#include "kv/kv-cache.h"
#include "kv/kv-pool.h"
#include "model/model.h"
#include "support/greedy-reference.h"
#include "support/test-data.h"
#include "synthetic-model.h"

namespace hearth::test {
namespace {

class CudaKvMemoryTest : public CudaTest {};

std::vector<float> pattern(int64_t n, float base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = base + float(i % 1000);
  return v;
}

TEST_F(CudaKvMemoryTest, CommitWriteReadDecommitRecommit) {
  const uint64_t g = backend_->commit_granularity();
  ASSERT_GT(g, 0u) << "the driver's virtual memory API was not found";
  const int64_t per_granule = int64_t(g / 4);  // floats
  void* base = backend_->reserve_kv(4 * g);
  ASSERT_NE(base, nullptr);
  float* f = static_cast<float*>(base);
  ASSERT_TRUE(backend_->commit(base, 0, 2 * g));
  const std::vector<float> a = pattern(2 * per_granule, 1.0f);
  backend_->upload(f, a.data(), 2 * per_granule);
  EXPECT_EQ(get(f, 2 * per_granule), a);
  // Give the second granule back, commit it (and a third) again, write them anew.
  backend_->decommit(base, g, g);
  ASSERT_TRUE(backend_->commit(base, g, 2 * g));
  const std::vector<float> b = pattern(2 * per_granule, 5000.0f);
  backend_->upload(f + per_granule, b.data(), 2 * per_granule);
  EXPECT_EQ(get(f + per_granule, 2 * per_granule), b);
  const std::vector<float> first(a.begin(), a.begin() + per_granule);
  EXPECT_EQ(get(f, per_granule), first);  // the kept granule still holds its rows
  backend_->decommit(base, 0, 3 * g);
  backend_->unreserve(base, 4 * g);
  EXPECT_TRUE(backend_->status().is_ok()) << backend_->status().message();
}

// A decommitted granule stays mapped (parked) and comes back with no new mapping; beyond the
// parked limit the oldest are unmapped, and a commit elsewhere reuses their handles.
TEST_F(CudaKvMemoryTest, DecommittedGranulesParkUpToTheLimit) {
  const uint64_t g = backend_->commit_granularity();
  ASSERT_GT(g, 0u);
  cuda_impl::CudaKvMemory mem(0, 3 * g);
  void* a = mem.reserve(8 * g);
  void* b = mem.reserve(8 * g);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(mem.commit(a, 0, 4 * g));
  EXPECT_EQ(mem.mapped_granules(), 4u);
  mem.decommit(a, 2 * g, 2 * g);
  EXPECT_EQ(mem.parked_granules(), 2u);
  EXPECT_EQ(mem.mapped_granules(), 4u);  // parked, still mapped
  ASSERT_TRUE(mem.commit(a, 0, 4 * g));  // the same rows again: nothing new mapped
  EXPECT_EQ(mem.parked_granules(), 0u);
  EXPECT_EQ(mem.mapped_granules(), 4u);
  EXPECT_EQ(mem.free_granules(), 0u);
  // The rows are usable after coming back.
  float* f = static_cast<float*>(a);
  const int64_t n = int64_t(4 * g / 4);
  const std::vector<float> rows = pattern(n, 3.0f);
  backend_->upload(f, rows.data(), n);
  EXPECT_EQ(get(f, n), rows);
  // Four parked against a limit of three: the oldest is unmapped onto the free list, and b's
  // commit takes it from there.
  mem.decommit(a, 0, 4 * g);
  EXPECT_EQ(mem.parked_granules(), 3u);
  EXPECT_EQ(mem.mapped_granules(), 3u);
  EXPECT_EQ(mem.free_granules(), 1u);
  ASSERT_TRUE(mem.commit(b, 0, g));
  EXPECT_EQ(mem.free_granules(), 0u);
  EXPECT_EQ(mem.mapped_granules(), 4u);
  // Parking the same granule twice (decommit, commit, decommit) counts it once.
  ASSERT_TRUE(mem.commit(a, g, g));
  mem.decommit(a, g, g);
  EXPECT_EQ(mem.parked_granules(), 3u);
  mem.unreserve(a);
  EXPECT_EQ(mem.parked_granules(), 0u);
  EXPECT_EQ(mem.mapped_granules(), 1u);
  mem.unreserve(b);
  EXPECT_EQ(mem.mapped_granules(), 0u);
}

// Mapping ahead: each new reservation's first granule is mapped and parked by the background
// thread, within the parked limit; a commit takes it with no new mapping, and the rows hold what
// is written.
TEST_F(CudaKvMemoryTest, MapAheadParksEachReservationsFirstGranuleWithinTheLimit) {
  const uint64_t g = backend_->commit_granularity();
  ASSERT_GT(g, 0u);
  cuda_impl::CudaKvMemory mem(0, 3 * g, /*map_ahead=*/true);
  std::vector<void*> ranges;
  for (int i = 0; i < 5; ++i) ranges.push_back(mem.reserve(2 * g));
  mem.wait_mapped_ahead();
  EXPECT_EQ(mem.parked_granules(), 3u);  // the limit: the last two map on use
  EXPECT_EQ(mem.mapped_granules(), 3u);
  ASSERT_TRUE(mem.commit(ranges[0], 0, 2 * g));
  EXPECT_EQ(mem.parked_granules(), 2u);
  EXPECT_EQ(mem.mapped_granules(), 4u);  // granule 1 newly mapped, granule 0 taken as it was
  float* f = static_cast<float*>(ranges[0]);
  const std::vector<float> a = pattern(int64_t(g / 2), 3.0f);  // both granules
  backend_->upload(f, a.data(), int64_t(a.size()));
  EXPECT_EQ(get(f, int64_t(a.size())), a);
  // Room again (a parked granule taken): the next reservation is mapped ahead.
  void* later = mem.reserve(g);
  mem.wait_mapped_ahead();
  EXPECT_EQ(mem.parked_granules(), 3u);
  ASSERT_TRUE(mem.commit(ranges[4], 0, g));  // not mapped ahead: mapped now
  EXPECT_EQ(mem.mapped_granules(), 6u);
  for (void* r : ranges) mem.unreserve(r);
  mem.unreserve(later);
  EXPECT_EQ(mem.mapped_granules(), 0u);
  EXPECT_TRUE(backend_->status().is_ok()) << backend_->status().message();
}

// A reservation the parked limit left out is mapped ahead when asked again (a server slot given
// an idle spare), once there is room; one mapped already is left as it is.
TEST_F(CudaKvMemoryTest, MapAheadAgainTakesAReservationTheLimitLeftOut) {
  const uint64_t g = backend_->commit_granularity();
  ASSERT_GT(g, 0u);
  cuda_impl::CudaKvMemory mem(0, g, /*map_ahead=*/true);
  void* a = mem.reserve(g);
  void* b = mem.reserve(g);
  mem.wait_mapped_ahead();
  EXPECT_EQ(mem.parked_granules(), 1u);  // a's; b's did not fit the limit
  EXPECT_EQ(mem.mapped_granules(), 1u);
  ASSERT_TRUE(mem.commit(a, 0, g));  // a's parked granule taken: room again
  EXPECT_EQ(mem.parked_granules(), 0u);
  mem.map_ahead(b);
  mem.wait_mapped_ahead();
  EXPECT_EQ(mem.parked_granules(), 1u);
  EXPECT_EQ(mem.mapped_granules(), 2u);
  mem.map_ahead(b);
  mem.map_ahead(a);  // committed: nothing to do
  mem.wait_mapped_ahead();
  EXPECT_EQ(mem.mapped_granules(), 2u);
  ASSERT_TRUE(mem.commit(b, 0, g));  // taken as it was mapped
  EXPECT_EQ(mem.mapped_granules(), 2u);
  EXPECT_EQ(mem.parked_granules(), 0u);
  mem.unreserve(a);
  mem.unreserve(b);
  EXPECT_EQ(mem.mapped_granules(), 0u);
  EXPECT_TRUE(backend_->status().is_ok()) << backend_->status().message();
}

TEST_F(CudaKvMemoryTest, AReservationCostsNoDeviceMemoryUntilCommitted) {
  const uint64_t g = backend_->commit_granularity();
  ASSERT_GT(g, 0u);
  const uint64_t big = uint64_t(8) << 30, committed = uint64_t(1) << 30;
  const auto before = backend_->device_memory_free();
  ASSERT_TRUE(before.has_value());
  void* base = backend_->reserve_kv(big);
  const auto reserved = backend_->device_memory_free();
  EXPECT_LT(*before - *reserved, uint64_t(64) << 20);
  ASSERT_TRUE(backend_->commit(base, 0, committed));
  const auto after = backend_->device_memory_free();
  EXPECT_GE(*reserved - *after, committed - (uint64_t(64) << 20));
  backend_->decommit(base, 0, committed);
  backend_->unreserve(base, big);
}

TEST_F(CudaKvMemoryTest, PooledCacheRowsSurviveGrowthAndTruncation) {
  // f32 rows of 16 KiB: a 2 MiB granule holds 128 positions, so 600 positions span 5.
  const int64_t dim = 4096, cap = 1024;
  auto pool = KvPool::create(cap, 16);
  auto kv = KvCache::create({backend_.get()}, cap, dim, {}, 0, {DType::F32, DType::F32}, pool);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  ASSERT_TRUE(kv->ensure(300).is_ok());
  const std::vector<float> rows = pattern(300 * dim, 2.0f);
  backend_->store_kv(static_cast<float*>(kv->k_data(0)), dev(rows), 0, dim, 300);
  kv->set_used(300);
  kv->set_used(100);
  kv->release_unused();
  EXPECT_EQ(pool->used_blocks(), pool->blocks_for(100));
  ASSERT_TRUE(kv->ensure(600).is_ok());
  const std::vector<float> more = pattern(500 * dim, 9000.0f);
  backend_->store_kv(static_cast<float*>(kv->k_data(0)), dev(more), 100, dim, 500);
  const std::vector<float> kept(rows.begin(), rows.begin() + 100 * dim);
  EXPECT_EQ(get(static_cast<float*>(kv->k_data(0)), 100 * dim), kept);
  EXPECT_EQ(get(static_cast<float*>(kv->k_data(0)) + 100 * dim, 500 * dim), more);
  kv = Status::error("dropped");
  EXPECT_EQ(pool->used_blocks(), 0);
}

// A random llama-shaped model (2 layers) on the GPU, decoded greedily with chained steps.
TEST_F(CudaKvMemoryTest, PooledCacheGivesTheEagerGreedyTokens) {
  const std::string path = temp_dir() + "/pooled-kv.gguf";
  bench::SyntheticSpec spec{};
  spec.shape = bench::SyntheticShape{"pooled-kv", 256, 512, 2, 4, 2, 1000, 256, 10000.0};
  spec.type = DType::Q4_0;
  ASSERT_TRUE(bench::write_synthetic_gguf(spec, path, 5).is_ok());
  LoadOptions opt;
  opt.n_threads = 2;
  opt.gpu_layers = -1;
  opt.use_weight_cache = false;
  auto m = load_model(path, opt);
  ASSERT_TRUE(m.is_ok()) << m.message();
  const Model& model = **m;
  const std::vector<int32_t> prompt = {1, 17, 300, 42};
  constexpr int kSteps = 100;  // across several 16-token blocks of the pool
  KvCache eager;
  ForwardScratch s1, s2;
  const int32_t first = prefill_and_pick(model, prompt, 256, eager, s1);
  const std::vector<int32_t> want = greedy_reference(model, eager, s1, first, kSteps);
  auto pool = KvPool::create(256, 16);
  auto pooled = model.new_kv_cache(256, {}, pool);
  ASSERT_TRUE(pooled.is_ok());
  std::vector<float> logits;
  ASSERT_TRUE(model.prefill(*pooled, prompt, s2, &logits).is_ok());
  ASSERT_EQ(greedy_argmax(logits.data(), model.hparams().n_vocab), first);
  std::vector<int32_t> got;
  auto run = model.decode_greedy(*pooled, first, kSteps, s2, [&](int32_t t) {
    got.push_back(t);
    return true;
  });
  ASSERT_TRUE(run.is_ok()) << run.message();
  EXPECT_EQ(got, want);
  EXPECT_EQ(pooled->held_blocks(), pool->blocks_for(pooled->used()));
  pooled = Status::error("dropped");
  EXPECT_EQ(pool->used_blocks(), 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hearth::test
