// The KV cache of one sequence: per layer, K and V rows [rows, n_kv_heads * head_dim] of an
// element type (f32, f16, bf16 or q8_0: llama.cpp's cache types) in the memory of the backend
// that runs that layer. A session owns one; the model is shared.
// A sliding-window layer keeps only what its window can still see: a ring of window + one
// pass's tokens rows (position p in row p % rows), so its memory does not grow with the context.
// A cache made from a KvPool (kv/kv-pool.h) reserves its layers' address ranges and commits
// memory block by block as positions are used (ensure), giving blocks back on truncation
// (release_unused) and destruction; one made without a pool allocates everything up front.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "kernels/ops.h"
#include "kv/kv-pool.h"

namespace hearth {

// The element types of a cache's K and V rows (llama.cpp's --cache-type-k / --cache-type-v):
// F32, F16, BF16 or Q8_0. f16 halves f32's memory and read traffic for a relative error of
// ~5e-4 per element, as llama.cpp's default does.
struct KvCacheTypes {
  DType k = DType::F16;
  DType v = DType::F16;
  bool operator==(const KvCacheTypes&) const = default;
};
// "f32", "f16", "bf16", "q8_0" (llama.cpp's names) <-> DType; nullopt for anything else.
std::optional<DType> parse_kv_type(const std::string& name);
const char* kv_type_name(DType t);
// "f32|f16|bf16|q8_0", for messages.
inline constexpr const char* kKvTypeChoices = "f32|f16|bf16|q8_0";

class KvCache {
 public:
  // Positions a cache may have (no model's context comes near; a file's may claim more).
  static constexpr int64_t kMaxPositions = int64_t(1) << 40;
  // layer_backends[l] is the backend that runs layer l (and so holds its cache).
  // windows[l] > 0 makes layer l a sliding layer of that window (empty: every layer full); a
  // forward pass appends at most max_pass_tokens positions per call. A layer whose backend
  // does not store a requested type (Backend::supports_kv_type) keeps f32 rows: layer_types()
  // says what each layer holds. Q8_0 needs kv_dim % 32 == 0 (the model checks head_dim).
  // pool: positions are committed lazily in its blocks (ensure); null: allocated up front.
  static Result<KvCache> create(const std::vector<Backend*>& layer_backends, int64_t capacity,
                                int64_t kv_dim, const std::vector<int64_t>& windows = {},
                                int64_t max_pass_tokens = 0, const KvCacheTypes& types = {},
                                std::shared_ptr<KvPool> pool = nullptr);
  KvCache() = default;
  KvCache(KvCache&& o) noexcept { *this = std::move(o); }
  KvCache& operator=(KvCache&& o) noexcept;
  KvCache(const KvCache&) = delete;
  ~KvCache();

  // Layer l's rows as the attention and store_kv ops take them.
  kernels::KvRows k(int64_t layer) const {
    return {layers_[size_t(layer)].k, layers_[size_t(layer)].k_type};
  }
  kernels::KvRows v(int64_t layer) const {
    return {layers_[size_t(layer)].v, layers_[size_t(layer)].v_type};
  }
  void* k_data(int64_t layer) { return layers_[size_t(layer)].k; }
  void* v_data(int64_t layer) { return layers_[size_t(layer)].v; }
  // The types asked for at creation, and what layer l actually holds.
  const KvCacheTypes& types() const { return types_; }
  KvCacheTypes layer_types(int64_t layer) const {
    return {layers_[size_t(layer)].k_type, layers_[size_t(layer)].v_type};
  }
  // Rows of layer l's ring (position p in row p % rows), 0 when the layer holds every position.
  int64_t ring_rows(int64_t layer) const { return layers_[size_t(layer)].ring_rows; }
  int64_t capacity() const { return capacity_; }  // positions a sequence may reach
  int64_t kv_dim() const { return kv_dim_; }
  int64_t n_layers() const { return int64_t(layers_.size()); }
  // K and V of every layer at full capacity (follows the element types): what an eager cache
  // allocates and a pooled one reserves.
  uint64_t bytes() const;
  // Memory held now: bytes() for an eager cache; a pooled one's committed granules.
  uint64_t committed_bytes() const;
  // Of committed_bytes(), the sliding-window rings (committed whole, outside the pool's blocks).
  uint64_t ring_bytes() const;

  // Pooled caches. ensure(n) takes the blocks covering positions [0, n) from the pool and
  // commits their memory; a forward pass calls it before writing positions below n (never
  // while a decode step is being recorded). An error when n exceeds capacity(), the pool has
  // too few free blocks (nothing taken then) or the backend is out of memory. release_unused()
  // gives back the blocks and memory past used() (after a truncation or reset). Eager caches:
  // ensure only checks capacity; release_unused does nothing.
  Status ensure(int64_t n);
  void release_unused();
  // A pooled cache about to be used (a server slot's next cache): asks each layer's backend to
  // prepare the first granule of its K and V ranges where nothing is committed yet
  // (Backend::prepare_kv; CUDA maps it on a background thread). Nothing for eager caches.
  void prepare_first_block() const;
  const std::shared_ptr<KvPool>& pool() const { return pool_; }
  int64_t held_blocks() const { return blocks_; }
  // Bytes per position of one layer's K plus V, at the requested types (memory estimates).
  static uint64_t bytes_per_position(int64_t kv_dim, const KvCacheTypes& types);

  // Positions [0, used) hold valid entries. Truncating keeps a prefix (prompt reuse, rewinds).
  int64_t used() const { return used_; }
  void set_used(int64_t n) {
    used_ = n;
    written_ = std::max(written_, n);
  }
  // The longest prefix of at most n positions a rewind may keep: n, or 0 when a ring layer has
  // already overwritten keys the next position's window would need.
  int64_t reusable_prefix(int64_t n) const;

  // Makes this cache hold `src`'s first n positions, copied row by row on each layer's backend
  // (device memory stays on the device), and sets used() to n: a prefix computed in one
  // sequence's cache serves another without recomputing it. Both caches must come from the same
  // model and context (same layers, backends, ring rows and element types); src must hold the n
  // positions and the keys position n's window needs (src.reusable_prefix(n) == n). A ring
  // layer copies its rows as they are, which is why the ring shapes must match.
  Status copy_prefix_from(const KvCache& src, int64_t n);

  // Host copies of the first `n` positions' rows, in each layer's element type (state
  // save/restore): restore takes only what save of a cache with the same shape and layer
  // types wrote, saved_bytes(n) bytes.
  uint64_t saved_bytes(int64_t n) const;
  Status save(int64_t n, std::vector<uint8_t>* out);
  Status restore(const std::vector<uint8_t>& data, int64_t n);

 private:
  struct Layer {
    Backend* backend = nullptr;
    float* k = nullptr;  // backend allocations (in floats), holding rows of k_type / v_type
    float* v = nullptr;
    DType k_type = DType::F32, v_type = DType::F32;
    int64_t k_row_bytes = 0, v_row_bytes = 0;
    int64_t window = 0;     // > 0: sliding layer
    int64_t ring_rows = 0;  // > 0: a ring of this many rows
    // Pooled caches: k and v are reserved ranges (Backend::reserve_kv) of *_reserved bytes with
    // [0, *_committed) committed; a ring layer is committed whole.
    bool reserved = false;
    uint64_t k_reserved = 0, v_reserved = 0, k_committed = 0, v_committed = 0;
  };
  // Rows of layer l that hold positions [0, n) (a ring: the ones still there).
  int64_t rows_for(const Layer& l, int64_t n) const {
    return l.ring_rows > 0 ? std::min(n, l.ring_rows) : n;
  }
  int64_t rows_allocated(const Layer& l) const { return l.ring_rows > 0 ? l.ring_rows : capacity_; }
  // Bytes of a buffer of row_bytes rows to commit for `blocks` blocks (whole granules, capped
  // at the reservation).
  uint64_t commit_target(const Layer& l, uint64_t row_bytes, uint64_t reserved,
                         int64_t blocks) const;
  bool commit_to(Layer& l, int64_t blocks);
  void decommit_to(Layer& l, int64_t blocks);
  void release_all();  // frees every layer and gives the blocks back
  std::vector<Layer> layers_;
  std::shared_ptr<KvPool> pool_;
  int64_t blocks_ = 0;  // pool blocks held (pooled caches)
  KvCacheTypes types_;
  int64_t capacity_ = 0;
  int64_t kv_dim_ = 0;
  int64_t used_ = 0;
  int64_t written_ = 0;  // highest position + 1 ever appended (ring rows below it are overwritten)
};

}  // namespace hearth
