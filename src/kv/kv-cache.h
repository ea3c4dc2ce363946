// The KV cache of one sequence: per layer, K and V rows [rows, n_kv_heads * head_dim] f32 in the
// memory of the backend that runs that layer. A session owns one; the model is shared.
// A sliding-window layer keeps only what its window can still see: a ring of window + one
// pass's tokens rows (position p in row p % rows), so its memory does not grow with the context.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"

namespace hearth {

class KvCache {
 public:
  // layer_backends[l] is the backend that runs layer l (and so holds its cache).
  // windows[l] > 0 makes layer l a sliding layer of that window (empty: every layer full); a
  // forward pass appends at most max_pass_tokens positions per call.
  static Result<KvCache> create(const std::vector<Backend*>& layer_backends, int64_t capacity,
                                int64_t kv_dim, const std::vector<int64_t>& windows = {},
                                int64_t max_pass_tokens = 0);
  KvCache() = default;
  KvCache(KvCache&& o) noexcept { *this = std::move(o); }
  KvCache& operator=(KvCache&& o) noexcept;
  KvCache(const KvCache&) = delete;
  ~KvCache();

  float* k(int64_t layer) { return layers_[size_t(layer)].k; }
  float* v(int64_t layer) { return layers_[size_t(layer)].v; }
  // Rows of layer l's ring (position p in row p % rows), 0 when the layer holds every position.
  int64_t ring_rows(int64_t layer) const { return layers_[size_t(layer)].ring_rows; }
  int64_t capacity() const { return capacity_; }  // positions a sequence may reach
  int64_t kv_dim() const { return kv_dim_; }
  int64_t n_layers() const { return int64_t(layers_.size()); }
  uint64_t bytes() const;  // K and V of every layer, as allocated

  // Positions [0, used) hold valid entries. Truncating keeps a prefix (prompt reuse, rewinds).
  int64_t used() const { return used_; }
  void set_used(int64_t n) {
    used_ = n;
    written_ = std::max(written_, n);
  }
  // The longest prefix of at most n positions a rewind may keep: n, or 0 when a ring layer has
  // already overwritten keys the next position's window would need.
  int64_t reusable_prefix(int64_t n) const;

  // Bytes of one K (or one V) row: what a position costs per layer and what copies move. The
  // element type is this one place's detail.
  uint64_t row_bytes() const { return uint64_t(kv_dim_) * sizeof(float); }

  // Makes this cache hold `src`'s first n positions, copied row by row on each layer's backend
  // (device memory stays on the device), and sets used() to n: a prefix computed in one
  // sequence's cache serves another without recomputing it. Both caches must come from the same
  // model and context (same layers, backends, ring rows); src must hold the n positions and the
  // keys position n's window needs (src.reusable_prefix(n) == n). A ring layer copies its rows
  // as they are, which is why the ring shapes must match.
  Status copy_prefix_from(const KvCache& src, int64_t n);

  // Host copies of the first `n` positions (state save/restore).
  Status save(int64_t n, std::vector<float>* out);
  Status restore(const std::vector<float>& data, int64_t n);

 private:
  struct Layer {
    Backend* backend = nullptr;
    float* k = nullptr;
    float* v = nullptr;
    int64_t window = 0;     // > 0: sliding layer
    int64_t ring_rows = 0;  // > 0: a ring of this many rows
  };
  // Rows of layer l that hold positions [0, n) (a ring: the ones still there).
  int64_t rows_for(const Layer& l, int64_t n) const {
    return l.ring_rows > 0 ? std::min(n, l.ring_rows) : n;
  }
  std::vector<Layer> layers_;
  int64_t capacity_ = 0;
  int64_t kv_dim_ = 0;
  int64_t used_ = 0;
  int64_t written_ = 0;  // highest position + 1 ever appended (ring rows below it are overwritten)
};

}  // namespace hearth
