// KvCache (kv/kv-cache.h) on the CPU backend: allocation and bytes, used positions, the ring
// rows of a sliding layer, reusable_prefix, prefix copies between caches, save/restore and
// creation errors.
// A new KV policy (another ring shape, paging) adds its arithmetic here against the same contract.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "kv/kv-cache.h"

namespace hearth {
namespace {

class KvCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  std::vector<Backend*> layers(int n) { return std::vector<Backend*>(size_t(n), cpu.get()); }
};

// K and V, f32: 8 bytes per row element.
constexpr uint64_t kBytesPerFloatPair = 2 * sizeof(float);

TEST_F(KvCacheTest, FullLayersHoldEveryPosition) {
  auto kv = KvCache::create(layers(3), /*capacity=*/64, /*kv_dim=*/32);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  EXPECT_EQ(kv->capacity(), 64);
  EXPECT_EQ(kv->kv_dim(), 32);
  EXPECT_EQ(kv->n_layers(), 3);
  EXPECT_EQ(kv->bytes(), 3u * 64u * 32u * kBytesPerFloatPair);
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_EQ(kv->ring_rows(l), 0) << "layer " << l;
    ASSERT_NE(kv->k(l), nullptr);
    ASSERT_NE(kv->v(l), nullptr);
    EXPECT_NE(kv->k(l), kv->v(l));
    // Every row is writable (ASan builds catch a short allocation).
    kv->k(l)[64 * 32 - 1] = 1.0f;
    kv->v(l)[64 * 32 - 1] = 2.0f;
  }
  EXPECT_NE(kv->k(0), kv->k(1));
}

TEST_F(KvCacheTest, UsedStartsEmptyAndTruncates) {
  auto kv = KvCache::create(layers(1), 16, 4);
  ASSERT_TRUE(kv.is_ok());
  EXPECT_EQ(kv->used(), 0);
  kv->set_used(10);
  EXPECT_EQ(kv->used(), 10);
  kv->set_used(3);  // a rewind keeps a prefix
  EXPECT_EQ(kv->used(), 3);
  kv->set_used(16);
  EXPECT_EQ(kv->used(), 16);
}

// A sliding layer of window W with passes of up to P tokens keeps W + P rows when that is less
// than the capacity; a window that already covers the context needs no ring.
TEST_F(KvCacheTest, SlidingLayerRingIsWindowPlusOnePass) {
  const int64_t cap = 1024, dim = 8, window = 16, pass = 4;
  auto kv = KvCache::create(layers(3), cap, dim, {0, window, 2 * window}, pass);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  EXPECT_EQ(kv->ring_rows(0), 0);
  EXPECT_EQ(kv->ring_rows(1), window + pass);
  EXPECT_EQ(kv->ring_rows(2), 2 * window + pass);
  EXPECT_EQ(kv->bytes(),
            uint64_t(cap + (window + pass) + (2 * window + pass)) * dim * kBytesPerFloatPair);
  // A ring layer's memory does not grow with the context.
  auto bigger = KvCache::create(layers(1), 16 * cap, dim, {window}, pass);
  auto smaller = KvCache::create(layers(1), cap, dim, {window}, pass);
  ASSERT_TRUE(bigger.is_ok() && smaller.is_ok());
  EXPECT_EQ(bigger->bytes(), smaller->bytes());
  EXPECT_EQ(smaller->bytes(), uint64_t(window + pass) * dim * kBytesPerFloatPair);
  // Every ring row is writable.
  smaller->k(0)[(window + pass) * dim - 1] = 1.0f;
}

TEST_F(KvCacheTest, RingBoundaries) {
  // No pass size given: one token a pass still needs a row beyond the window.
  auto one = KvCache::create(layers(1), 64, 4, {16});
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->ring_rows(0), 17);
  // window + pass == capacity: a ring would save nothing, the layer stays full.
  auto full = KvCache::create(layers(1), 64, 4, {60}, 4);
  ASSERT_TRUE(full.is_ok());
  EXPECT_EQ(full->ring_rows(0), 0);
  EXPECT_EQ(full->bytes(), 64u * 4u * kBytesPerFloatPair);
  // One below the capacity: a ring.
  auto ring = KvCache::create(layers(1), 64, 4, {59}, 4);
  ASSERT_TRUE(ring.is_ok());
  EXPECT_EQ(ring->ring_rows(0), 63);
  // A window wider than the context.
  auto wide = KvCache::create(layers(1), 64, 4, {4096}, 4);
  ASSERT_TRUE(wide.is_ok());
  EXPECT_EQ(wide->ring_rows(0), 0);
}

TEST_F(KvCacheTest, FullLayersCanRewindAnywhere) {
  auto kv = KvCache::create(layers(2), 256, 4);
  ASSERT_TRUE(kv.is_ok());
  kv->set_used(200);
  for (int64_t n : {0, 1, 50, 199, 200}) EXPECT_EQ(kv->reusable_prefix(n), n);
  kv->set_used(10);  // truncating never loses what a full layer holds
  EXPECT_EQ(kv->reusable_prefix(150), 150);
}

// window 16, pass 4: a ring of 20 rows. After positions [0, 100) were written, the ring holds
// [80, 100). Position n needs keys [n - 15, n), so a rewind to n keeps its prefix from n = 95.
TEST_F(KvCacheTest, RewindStopsWhereTheRingNoLongerHoldsTheWindow) {
  const int64_t window = 16, pass = 4, rows = window + pass, written = 100;
  auto kv = KvCache::create(layers(2), 1024, 4, {0, window}, pass);
  ASSERT_TRUE(kv.is_ok());
  ASSERT_EQ(kv->ring_rows(1), rows);
  // Before the ring wraps every prefix is still there, even one shorter than the window.
  kv->set_used(10);
  EXPECT_EQ(kv->reusable_prefix(4), 4);
  kv->set_used(rows);
  for (int64_t n : {int64_t(1), int64_t(5), rows - 1, rows})
    EXPECT_EQ(kv->reusable_prefix(n), n) << n;
  // One position more overwrites row 0 (position 0): a rewind whose window still reaches
  // position 0 is lost, one whose window starts at position 1 is not.
  kv->set_used(rows + 1);
  EXPECT_EQ(kv->reusable_prefix(1), 0);
  EXPECT_EQ(kv->reusable_prefix(window - 1), 0);
  EXPECT_EQ(kv->reusable_prefix(window), window);

  kv->set_used(written);
  const int64_t first_kept = written - rows + window - 1;  // 95
  EXPECT_EQ(kv->reusable_prefix(written), written);
  EXPECT_EQ(kv->reusable_prefix(first_kept), first_kept);
  EXPECT_EQ(kv->reusable_prefix(first_kept - 1), 0);
  EXPECT_EQ(kv->reusable_prefix(10), 0);
  EXPECT_EQ(kv->reusable_prefix(0), 0);

  // Truncating does not bring overwritten rows back: the highest position ever written counts.
  kv->set_used(50);
  EXPECT_EQ(kv->used(), 50);
  EXPECT_EQ(kv->reusable_prefix(50), 0);
  EXPECT_EQ(kv->reusable_prefix(first_kept), first_kept);
}

TEST_F(KvCacheTest, SaveRestoreRoundTripsRingRows) {
  const int64_t dim = 2, window = 4, pass = 2, rows = window + pass;
  auto kv = KvCache::create(layers(2), 32, dim, {0, window}, pass);
  ASSERT_TRUE(kv.is_ok());
  const int64_t n = 5;  // fewer than the ring's rows: rows [0, 5) of both layers
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < n * dim; ++i) {
      kv->k(l)[i] = float(100 * l + i);
      kv->v(l)[i] = float(-100 * l - i);
    }
  kv->set_used(n);
  std::vector<float> saved;
  ASSERT_TRUE(kv->save(n, &saved).is_ok());
  EXPECT_EQ(saved.size(), size_t(2 * 2 * n * dim));
  EXPECT_FALSE(kv->save(n + 1, &saved).is_ok()) << "beyond used";

  auto other = KvCache::create(layers(2), 32, dim, {0, window}, pass);
  ASSERT_TRUE(other.is_ok());
  ASSERT_TRUE(other->restore(saved, n).is_ok());
  EXPECT_EQ(other->used(), n);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < n * dim; ++i) {
      EXPECT_EQ(other->k(l)[i], float(100 * l + i));
      EXPECT_EQ(other->v(l)[i], float(-100 * l - i));
    }
  // A state of another shape is refused.
  saved.pop_back();
  EXPECT_FALSE(other->restore(saved, n).is_ok());

  // Once the ring has wrapped past what position n's window needs, saving n is refused.
  kv->set_used(4 * rows);
  std::vector<float> late;
  EXPECT_FALSE(kv->save(n, &late).is_ok());
  EXPECT_TRUE(kv->save(4 * rows, &late).is_ok());
}

// Fills layer l's K and V rows [0, rows) with values that name the cache, layer and element.
void fill(KvCache& kv, int64_t rows, float tag) {
  for (int64_t l = 0; l < kv.n_layers(); ++l)
    for (int64_t i = 0; i < rows * kv.kv_dim(); ++i) {
      kv.k(l)[i] = tag + float(1000 * l + i);
      kv.v(l)[i] = -tag - float(1000 * l + i);
    }
}

// The prefix copy the server uses to share a prompt between sequences: rows [0, n) of every
// layer, nothing past them, and used() = n.
TEST_F(KvCacheTest, CopyPrefixCopiesTheFirstRowsOfEveryLayer) {
  const int64_t cap = 16, dim = 3, n = 5;
  auto src = KvCache::create(layers(2), cap, dim);
  auto dst = KvCache::create(layers(2), cap, dim);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  EXPECT_EQ(src->row_bytes(), uint64_t(dim) * sizeof(float));
  fill(*src, cap, 0.5f);
  fill(*dst, cap, 70000.0f);
  src->set_used(9);
  ASSERT_TRUE(dst->copy_prefix_from(*src, n).is_ok());
  EXPECT_EQ(dst->used(), n);
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t i = 0; i < n * dim; ++i) {
      EXPECT_EQ(dst->k(l)[i], src->k(l)[i]) << "layer " << l << " element " << i;
      EXPECT_EQ(dst->v(l)[i], src->v(l)[i]) << "layer " << l << " element " << i;
    }
    // The row after the prefix keeps what the destination had.
    EXPECT_EQ(dst->k(l)[n * dim], 70000.0f + float(1000 * l + n * dim));
  }
  // Zero positions is an empty cache, not an error.
  ASSERT_TRUE(dst->copy_prefix_from(*src, 0).is_ok());
  EXPECT_EQ(dst->used(), 0);
}

// A sliding layer's ring is copied as it stands (position p in row p % rows), and the copy
// inherits how far the source wrote: a rewind in the copy is refused exactly where the
// source's would be.
TEST_F(KvCacheTest, CopyPrefixOfAWrappedRingKeepsTheRewindLimit) {
  const int64_t dim = 2, window = 4, pass = 2, rows = window + pass, written = 3 * rows + 1;
  auto src = KvCache::create(layers(2), 64, dim, {0, window}, pass);
  auto dst = KvCache::create(layers(2), 64, dim, {0, window}, pass);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  fill(*src, rows, 0.25f);  // the ring layer's rows, and the full layer's first rows
  for (int64_t i = 0; i < written * dim; ++i) src->k(0)[i] = float(i);
  src->set_used(written);
  ASSERT_TRUE(dst->copy_prefix_from(*src, written).is_ok());
  EXPECT_EQ(dst->used(), written);
  for (int64_t i = 0; i < written * dim; ++i) ASSERT_EQ(dst->k(0)[i], float(i)) << i;
  for (int64_t i = 0; i < rows * dim; ++i) {
    EXPECT_EQ(dst->k(1)[i], src->k(1)[i]) << i;
    EXPECT_EQ(dst->v(1)[i], src->v(1)[i]) << i;
  }
  for (int64_t m : {int64_t(1), written - rows, written - 2, written})
    EXPECT_EQ(dst->reusable_prefix(m), src->reusable_prefix(m)) << m;
  // Position 5's window was overwritten in the source's ring: no copy of that prefix.
  auto refused = dst->copy_prefix_from(*src, 5);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find("sliding-window"), std::string::npos) << refused.message();
}

TEST_F(KvCacheTest, CopyPrefixRefusesOtherShapesAndMissingPositions) {
  auto src = KvCache::create(layers(2), 16, 4);
  ASSERT_TRUE(src.is_ok());
  src->set_used(6);
  auto beyond = KvCache::create(layers(2), 16, 4);
  ASSERT_TRUE(beyond.is_ok());
  auto st = beyond->copy_prefix_from(*src, 7);
  ASSERT_FALSE(st.is_ok()) << "beyond used";
  EXPECT_NE(st.message().find("holding 6"), std::string::npos) << st.message();
  EXPECT_FALSE(beyond->copy_prefix_from(*src, -1).is_ok());
  EXPECT_FALSE(src->copy_prefix_from(*src, 2).is_ok()) << "itself";
  auto other_dim = KvCache::create(layers(2), 16, 8);
  auto other_cap = KvCache::create(layers(2), 32, 4);
  auto other_layers = KvCache::create(layers(3), 16, 4);
  auto other_ring = KvCache::create(layers(2), 16, 4, {0, 4}, 2);
  for (auto* dst : {&other_dim, &other_cap, &other_layers, &other_ring}) {
    ASSERT_TRUE(dst->is_ok());
    auto mismatch = (*dst)->copy_prefix_from(*src, 3);
    ASSERT_FALSE(mismatch.is_ok());
    EXPECT_NE(mismatch.message().find("different"), std::string::npos) << mismatch.message();
    EXPECT_EQ((*dst)->used(), 0);
  }
}

TEST_F(KvCacheTest, MoveTransfersTheBuffers) {
  auto kv = KvCache::create(layers(2), 16, 4);
  ASSERT_TRUE(kv.is_ok());
  float* k0 = kv->k(0);
  kv->set_used(7);
  KvCache moved = std::move(*kv);
  EXPECT_EQ(moved.k(0), k0);
  EXPECT_EQ(moved.used(), 7);
  EXPECT_EQ(moved.n_layers(), 2);
  EXPECT_EQ(kv->n_layers(), 0);
  EXPECT_EQ(kv->used(), 0);
  EXPECT_EQ(kv->bytes(), 0u);
}

TEST_F(KvCacheTest, BadSizesAreErrors) {
  for (auto [cap, dim] : {std::pair<int64_t, int64_t>{0, 8}, {-1, 8}, {16, 0}, {16, -4}}) {
    auto kv = KvCache::create(layers(2), cap, dim);
    ASSERT_FALSE(kv.is_ok()) << cap << " x " << dim;
    EXPECT_NE(kv.message().find("invalid size"), std::string::npos) << kv.message();
  }
  // One window per layer, or none.
  auto kv = KvCache::create(layers(3), 16, 8, {0, 4});
  ASSERT_FALSE(kv.is_ok());
  EXPECT_NE(kv.message().find("one window per layer"), std::string::npos) << kv.message();
}

#if defined(__SANITIZE_ADDRESS__)
#define HEARTH_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEARTH_TEST_ASAN 1
#endif
#endif

TEST_F(KvCacheTest, OutOfMemoryIsAnError) {
#ifdef HEARTH_TEST_ASAN
  GTEST_SKIP() << "ASan aborts on an allocation this size instead of failing it";
#else
  // 2^40 positions x 1024 floats: 4 PiB, more than any address space.
  auto kv = KvCache::create(layers(1), int64_t(1) << 40, 1024);
  ASSERT_FALSE(kv.is_ok());
  EXPECT_NE(kv.message().find("out of memory"), std::string::npos) << kv.message();
#endif
}

}  // namespace
}  // namespace hearth
