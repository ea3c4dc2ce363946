// KvCache (kv/kv-cache.h) on the CPU backend: allocation and bytes (per element type), used
// positions, the ring rows of a sliding layer, reusable_prefix, prefix copies between caches,
// save/restore of f32 and typed rows, and creation errors (sizes, cache types).
// A new KV policy (another ring shape, paging) adds its arithmetic here against the same contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "kernels/ops.h"
#include "kv/kv-cache.h"
#include "kv/kv-pool.h"

namespace hearth {
namespace {

class KvCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  std::vector<Backend*> layers(int n) { return std::vector<Backend*>(size_t(n), cpu.get()); }
};

// K and V, f32: 8 bytes per row element.
constexpr uint64_t kBytesPerFloatPair = 2 * sizeof(float);
const KvCacheTypes kF32{DType::F32, DType::F32};

float* f32_rows(const kernels::KvRows& rows) {
  return static_cast<float*>(const_cast<void*>(rows.data));
}

TEST_F(KvCacheTest, FullLayersHoldEveryPosition) {
  auto kv = KvCache::create(layers(3), /*capacity=*/64, /*kv_dim=*/32, {}, 0, kF32);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  EXPECT_EQ(kv->capacity(), 64);
  EXPECT_EQ(kv->kv_dim(), 32);
  EXPECT_EQ(kv->n_layers(), 3);
  EXPECT_EQ(kv->bytes(), 3u * 64u * 32u * kBytesPerFloatPair);
  for (int64_t l = 0; l < 3; ++l) {
    EXPECT_EQ(kv->ring_rows(l), 0) << "layer " << l;
    ASSERT_NE(kv->k(l).data, nullptr);
    ASSERT_NE(kv->v(l).data, nullptr);
    EXPECT_EQ(kv->k(l).type, DType::F32);
    EXPECT_NE(kv->k(l).data, kv->v(l).data);
    // Every row is writable (ASan builds catch a short allocation).
    f32_rows(kv->k(l))[64 * 32 - 1] = 1.0f;
    f32_rows(kv->v(l))[64 * 32 - 1] = 2.0f;
  }
  EXPECT_NE(kv->k(0).data, kv->k(1).data);
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
  auto kv = KvCache::create(layers(3), cap, dim, {0, window, 2 * window}, pass, kF32);
  ASSERT_TRUE(kv.is_ok()) << kv.message();
  EXPECT_EQ(kv->ring_rows(0), 0);
  EXPECT_EQ(kv->ring_rows(1), window + pass);
  EXPECT_EQ(kv->ring_rows(2), 2 * window + pass);
  EXPECT_EQ(kv->bytes(),
            uint64_t(cap + (window + pass) + (2 * window + pass)) * dim * kBytesPerFloatPair);
  // A ring layer's memory does not grow with the context.
  auto bigger = KvCache::create(layers(1), 16 * cap, dim, {window}, pass, kF32);
  auto smaller = KvCache::create(layers(1), cap, dim, {window}, pass, kF32);
  ASSERT_TRUE(bigger.is_ok() && smaller.is_ok());
  EXPECT_EQ(bigger->bytes(), smaller->bytes());
  EXPECT_EQ(smaller->bytes(), uint64_t(window + pass) * dim * kBytesPerFloatPair);
  // Every ring row is writable.
  f32_rows(smaller->k(0))[(window + pass) * dim - 1] = 1.0f;
}

TEST_F(KvCacheTest, RingBoundaries) {
  // No pass size given: one token a pass still needs a row beyond the window.
  auto one = KvCache::create(layers(1), 64, 4, {16});
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->ring_rows(0), 17);
  // window + pass == capacity: a ring would save nothing, the layer stays full.
  auto full = KvCache::create(layers(1), 64, 4, {60}, 4, kF32);
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
  auto kv = KvCache::create(layers(2), 32, dim, {0, window}, pass, kF32);
  ASSERT_TRUE(kv.is_ok());
  const int64_t n = 5;  // fewer than the ring's rows: rows [0, 5) of both layers
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < n * dim; ++i) {
      f32_rows(kv->k(l))[i] = float(100 * l + i);
      f32_rows(kv->v(l))[i] = float(-100 * l - i);
    }
  kv->set_used(n);
  std::vector<uint8_t> saved;
  ASSERT_TRUE(kv->save(n, &saved).is_ok());
  EXPECT_EQ(saved.size(), size_t(2 * 2 * n * dim) * sizeof(float));
  EXPECT_EQ(saved.size(), kv->saved_bytes(n));
  EXPECT_FALSE(kv->save(n + 1, &saved).is_ok()) << "beyond used";

  auto other = KvCache::create(layers(2), 32, dim, {0, window}, pass, kF32);
  ASSERT_TRUE(other.is_ok());
  ASSERT_TRUE(other->restore(saved, n).is_ok());
  EXPECT_EQ(other->used(), n);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < n * dim; ++i) {
      EXPECT_EQ(f32_rows(other->k(l))[i], float(100 * l + i));
      EXPECT_EQ(f32_rows(other->v(l))[i], float(-100 * l - i));
    }
  // A state of another shape is refused.
  saved.pop_back();
  EXPECT_FALSE(other->restore(saved, n).is_ok());

  // Once the ring has wrapped past what position n's window needs, saving n is refused.
  kv->set_used(4 * rows);
  std::vector<uint8_t> late;
  EXPECT_FALSE(kv->save(n, &late).is_ok());
  EXPECT_TRUE(kv->save(4 * rows, &late).is_ok());
}

// Fills layer l's K and V rows [0, rows) with values that name the cache, layer and element.
// An f32 cache's rows as floats.
float* kf(KvCache& kv, int64_t l) {
  return static_cast<float*>(kv.k_data(l));
}
float* vf(KvCache& kv, int64_t l) {
  return static_cast<float*>(kv.v_data(l));
}

void fill(KvCache& kv, int64_t rows, float tag) {
  for (int64_t l = 0; l < kv.n_layers(); ++l)
    for (int64_t i = 0; i < rows * kv.kv_dim(); ++i) {
      kf(kv, l)[i] = tag + float(1000 * l + i);
      vf(kv, l)[i] = -tag - float(1000 * l + i);
    }
}

// The prefix copy the server uses to share a prompt between sequences: rows [0, n) of every
// layer, nothing past them, and used() = n.
TEST_F(KvCacheTest, CopyPrefixCopiesTheFirstRowsOfEveryLayer) {
  const int64_t cap = 16, dim = 3, n = 5;
  auto src = KvCache::create(layers(2), cap, dim, {}, 0, kF32);
  auto dst = KvCache::create(layers(2), cap, dim, {}, 0, kF32);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  fill(*src, cap, 0.5f);
  fill(*dst, cap, 70000.0f);
  src->set_used(9);
  ASSERT_TRUE(dst->copy_prefix_from(*src, n).is_ok());
  EXPECT_EQ(dst->used(), n);
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t i = 0; i < n * dim; ++i) {
      EXPECT_EQ(kf(*dst, l)[i], kf(*src, l)[i]) << "layer " << l << " element " << i;
      EXPECT_EQ(vf(*dst, l)[i], vf(*src, l)[i]) << "layer " << l << " element " << i;
    }
    // The row after the prefix keeps what the destination had.
    EXPECT_EQ(kf(*dst, l)[n * dim], 70000.0f + float(1000 * l + n * dim));
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
  auto src = KvCache::create(layers(2), 64, dim, {0, window}, pass, kF32);
  auto dst = KvCache::create(layers(2), 64, dim, {0, window}, pass, kF32);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  fill(*src, rows, 0.25f);  // the ring layer's rows, and the full layer's first rows
  for (int64_t i = 0; i < written * dim; ++i) kf(*src, 0)[i] = float(i);
  src->set_used(written);
  ASSERT_TRUE(dst->copy_prefix_from(*src, written).is_ok());
  EXPECT_EQ(dst->used(), written);
  for (int64_t i = 0; i < written * dim; ++i) ASSERT_EQ(kf(*dst, 0)[i], float(i)) << i;
  for (int64_t i = 0; i < rows * dim; ++i) {
    EXPECT_EQ(kf(*dst, 1)[i], kf(*src, 1)[i]) << i;
    EXPECT_EQ(vf(*dst, 1)[i], vf(*src, 1)[i]) << i;
  }
  for (int64_t m : {int64_t(1), written - rows, written - 2, written})
    EXPECT_EQ(dst->reusable_prefix(m), src->reusable_prefix(m)) << m;
  // Position 5's window was overwritten in the source's ring: no copy of that prefix.
  auto refused = dst->copy_prefix_from(*src, 5);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find("sliding-window"), std::string::npos) << refused.message();
}

TEST_F(KvCacheTest, CopyPrefixRefusesOtherShapesAndMissingPositions) {
  auto src = KvCache::create(layers(2), 16, 4, {}, 0, kF32);
  ASSERT_TRUE(src.is_ok());
  src->set_used(6);
  auto beyond = KvCache::create(layers(2), 16, 4, {}, 0, kF32);
  ASSERT_TRUE(beyond.is_ok());
  auto st = beyond->copy_prefix_from(*src, 7);
  ASSERT_FALSE(st.is_ok()) << "beyond used";
  EXPECT_NE(st.message().find("holding 6"), std::string::npos) << st.message();
  EXPECT_FALSE(beyond->copy_prefix_from(*src, -1).is_ok());
  EXPECT_FALSE(src->copy_prefix_from(*src, 2).is_ok()) << "itself";
  auto other_dim = KvCache::create(layers(2), 16, 8, {}, 0, kF32);
  auto other_cap = KvCache::create(layers(2), 32, 4, {}, 0, kF32);
  auto other_layers = KvCache::create(layers(3), 16, 4, {}, 0, kF32);
  auto other_ring = KvCache::create(layers(2), 16, 4, {0, 4}, 2, kF32);
  auto other_types = KvCache::create(layers(2), 16, 4, {}, 0, {DType::F16, DType::F32});
  for (auto* dst : {&other_dim, &other_cap, &other_layers, &other_ring, &other_types}) {
    ASSERT_TRUE(dst->is_ok());
    auto mismatch = (*dst)->copy_prefix_from(*src, 3);
    ASSERT_FALSE(mismatch.is_ok());
    EXPECT_NE(mismatch.message().find("different"), std::string::npos) << mismatch.message();
    EXPECT_EQ((*dst)->used(), 0);
  }
}

// Typed rows copy as bytes: q8_0 keys (34 bytes a row of 32) and f16 values, the first n rows
// exactly, the rest untouched.
TEST_F(KvCacheTest, CopyPrefixOfTypedRows) {
  const int64_t cap = 8, dim = 32, n = 3;
  const KvCacheTypes types{DType::Q8_0, DType::F16};
  auto src = KvCache::create(layers(1), cap, dim, {}, 0, types);
  auto dst = KvCache::create(layers(1), cap, dim, {}, 0, types);
  ASSERT_TRUE(src.is_ok() && dst.is_ok());
  const int64_t k_row = 34, v_row = dim * 2;
  auto* sk = static_cast<uint8_t*>(src->k_data(0));
  auto* sv = static_cast<uint8_t*>(src->v_data(0));
  for (int64_t i = 0; i < cap * k_row; ++i) sk[i] = uint8_t(i * 7 + 1);
  for (int64_t i = 0; i < cap * v_row; ++i) sv[i] = uint8_t(i * 5 + 3);
  std::memset(dst->k_data(0), 0xEE, size_t(cap * k_row));
  std::memset(dst->v_data(0), 0xEE, size_t(cap * v_row));
  src->set_used(cap);
  ASSERT_TRUE(dst->copy_prefix_from(*src, n).is_ok());
  const auto* dk = static_cast<const uint8_t*>(dst->k_data(0));
  const auto* dv = static_cast<const uint8_t*>(dst->v_data(0));
  EXPECT_EQ(std::memcmp(dk, sk, size_t(n * k_row)), 0);
  EXPECT_EQ(std::memcmp(dv, sv, size_t(n * v_row)), 0);
  // (a row run of whole floats may take up to 3 bytes of row n, which holds no position)
  for (int64_t i = n * k_row + 4; i < cap * k_row; ++i) ASSERT_EQ(dk[i], 0xEE) << i;
  for (int64_t i = n * v_row; i < cap * v_row; ++i) ASSERT_EQ(dv[i], 0xEE) << i;
}

TEST_F(KvCacheTest, MoveTransfersTheBuffers) {
  auto kv = KvCache::create(layers(2), 16, 4);
  ASSERT_TRUE(kv.is_ok());
  const void* k0 = kv->k(0).data;
  kv->set_used(7);
  KvCache moved = std::move(*kv);
  EXPECT_EQ(moved.k(0).data, k0);
  EXPECT_EQ(moved.types(), KvCacheTypes{});
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

// bytes() follows the element types: f16 and bf16 half of f32, q8_0 34 bytes per 32 values
// (ggml's block_q8_0); K and V may differ. The default is f16 for both (llama.cpp's).
TEST_F(KvCacheTest, BytesFollowTheElementTypes) {
  const int64_t cap = 64, dim = 64;
  auto f16 = KvCache::create(layers(2), cap, dim);
  ASSERT_TRUE(f16.is_ok()) << f16.message();
  EXPECT_EQ(f16->types(), (KvCacheTypes{DType::F16, DType::F16}));
  EXPECT_EQ(f16->bytes(), uint64_t(2 * cap * dim * 2 * 2));
  auto bf16 = KvCache::create(layers(2), cap, dim, {}, 0, {DType::BF16, DType::BF16});
  ASSERT_TRUE(bf16.is_ok());
  EXPECT_EQ(bf16->bytes(), f16->bytes());
  auto q8 = KvCache::create(layers(2), cap, dim, {}, 0, {DType::Q8_0, DType::Q8_0});
  ASSERT_TRUE(q8.is_ok());
  EXPECT_EQ(q8->bytes(), uint64_t(2 * cap * (dim / 32) * 34 * 2));
  EXPECT_EQ(q8->layer_types(1), (KvCacheTypes{DType::Q8_0, DType::Q8_0}));
  auto mixed = KvCache::create(layers(2), cap, dim, {}, 0, {DType::Q8_0, DType::F32});
  ASSERT_TRUE(mixed.is_ok());
  EXPECT_EQ(mixed->bytes(), uint64_t(2 * cap * ((dim / 32) * 34 + dim * 4)));
  EXPECT_EQ(mixed->k(0).type, DType::Q8_0);
  EXPECT_EQ(mixed->v(0).type, DType::F32);
  EXPECT_EQ(KvCache::bytes_per_position(dim, {DType::Q8_0, DType::F32}),
            uint64_t((dim / 32) * 34 + dim * 4));
  // The last byte of every layer's rows is writable (ASan builds catch a short allocation).
  for (int64_t l = 0; l < 2; ++l)
    static_cast<uint8_t*>(q8->k_data(l))[cap * (dim / 32) * 34 - 1] = 1;
}

// Typed rows save and restore as their bytes: q8_0 rows of 34 bytes make a transfer that is not
// whole floats, and the rows past the restored ones keep what they held.
TEST_F(KvCacheTest, SaveRestoreRoundTripsTypedRows) {
  const int64_t dim = 32, n = 5, cap = 16;
  for (KvCacheTypes types :
       {KvCacheTypes{DType::Q8_0, DType::F16}, KvCacheTypes{DType::BF16, DType::Q8_0}}) {
    auto kv = KvCache::create(layers(2), cap, dim, {}, 0, types);
    ASSERT_TRUE(kv.is_ok()) << kv.message();
    std::vector<float> src(size_t(n * dim));
    for (size_t i = 0; i < src.size(); ++i) src[i] = float(i % 17) * 0.25f - 2.0f;
    for (int64_t l = 0; l < 2; ++l) {
      cpu->store_kv(kv->k_data(l), kv->k(l).type, src.data(), 0, dim, n);
      cpu->store_kv(kv->v_data(l), kv->v(l).type, src.data(), 0, dim, n);
    }
    kv->set_used(n);
    std::vector<uint8_t> saved;
    ASSERT_TRUE(kv->save(n, &saved).is_ok());
    ASSERT_EQ(saved.size(), kv->saved_bytes(n));
    EXPECT_EQ(saved.size(),
              size_t(2 * n *
                     (kernels::kv_row_bytes(types.k, dim) + kernels::kv_row_bytes(types.v, dim))));

    auto other = KvCache::create(layers(2), cap, dim, {}, 0, types);
    ASSERT_TRUE(other.is_ok());
    const int64_t row_k = kernels::kv_row_bytes(types.k, dim);
    auto* next_row = static_cast<uint8_t*>(other->k_data(1)) + n * row_k;
    std::fill(next_row, next_row + row_k, uint8_t(0xAB));
    ASSERT_TRUE(other->restore(saved, n).is_ok());
    for (int64_t l = 0; l < 2; ++l) {
      EXPECT_EQ(std::memcmp(other->k_data(l), kv->k_data(l), size_t(n * row_k)), 0) << l;
      EXPECT_EQ(std::memcmp(other->v_data(l), kv->v_data(l),
                            size_t(n * kernels::kv_row_bytes(types.v, dim))),
                0)
          << l;
    }
    for (int64_t i = 0; i < row_k; ++i) EXPECT_EQ(next_row[i], 0xAB) << i;
    // The rows read back as the stored values to within the type's rounding.
    std::vector<float> back(static_cast<size_t>(dim));
    kernels::load_kv_row(types.k, other->k(0).data, back.data(), dim);
    for (int64_t i = 0; i < dim; ++i) EXPECT_NEAR(back[size_t(i)], src[size_t(i)], 0.02) << i;
  }
}

// The CPU backend's store_kv converts as it appends, and a ring's append wraps: 5 tokens at
// position 18 of a 20-row ring land in rows 18, 19, 0, 1, 2, each the type's rounding of its row.
TEST_F(KvCacheTest, StoreKvConvertsAndWrapsARing) {
  const int64_t dim = 64, ring = 20, n = 5;
  std::vector<float> src(size_t(n * dim));
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(int(i % 29) - 14) / 7.0f;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    const int64_t row = kernels::kv_row_bytes(t, dim);
    std::vector<uint8_t> cache(static_cast<size_t>(ring * row), 0);
    std::vector<uint8_t> want(static_cast<size_t>(row));
    cpu->store_kv(cache.data(), t, src.data(), 18, dim, n, ring);
    for (int64_t i = 0; i < n; ++i) {
      kernels::store_kv_rows(t, src.data() + i * dim, want.data(), 1, dim);
      const int64_t r = (18 + i) % ring;
      EXPECT_EQ(std::memcmp(cache.data() + r * row, want.data(), size_t(row)), 0)
          << dtype_name(t) << " token " << i << " row " << r;
    }
    for (int64_t r = 3; r < 18; ++r)
      for (int64_t b = 0; b < row; ++b)
        ASSERT_EQ(cache[size_t(r * row + b)], 0) << dtype_name(t) << " row " << r;
  }
}

TEST_F(KvCacheTest, BadCacheTypesAreErrors) {
  auto q4 = KvCache::create(layers(1), 16, 64, {}, 0, {DType::Q4_0, DType::F16});
  ASSERT_FALSE(q4.is_ok());
  EXPECT_NE(q4.message().find("K type Q4_0 is not a cache type"), std::string::npos)
      << q4.message();
  auto odd = KvCache::create(layers(1), 16, 48, {}, 0, {DType::F16, DType::Q8_0});
  ASSERT_FALSE(odd.is_ok());
  EXPECT_NE(odd.message().find("V type q8_0 needs rows of whole 32-value blocks"),
            std::string::npos)
      << odd.message();
  EXPECT_EQ(parse_kv_type("q8_0"), DType::Q8_0);
  EXPECT_EQ(parse_kv_type("bf16"), DType::BF16);
  EXPECT_EQ(parse_kv_type("q4_0"), std::nullopt);
  EXPECT_EQ(parse_kv_type("F16"), std::nullopt) << "llama.cpp's names are lower case";
  EXPECT_STREQ(kv_type_name(DType::F32), "f32");
}

#if defined(__SANITIZE_ADDRESS__)
#define HEARTH_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEARTH_TEST_ASAN 1
#endif
#endif

// A capacity from a file's context_length can be 2^63 - 1: refused before any size is counted
// (the sums below it would wrap), with or without a pool.
TEST_F(KvCacheTest, PositionsPastWhatCanBeCountedAreErrors) {
  for (int64_t cap : {KvCache::kMaxPositions + 1, std::numeric_limits<int64_t>::max()}) {
    for (bool pooled : {false, true}) {
      auto kv = KvCache::create(layers(2), cap, 64, {}, 0, kF32,
                                pooled ? KvPool::create(KvPool::kUnbounded, 16) : nullptr);
      ASSERT_FALSE(kv.is_ok()) << cap;
      EXPECT_NE(kv.message().find("positions is more than"), std::string::npos) << kv.message();
    }
  }
}

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
