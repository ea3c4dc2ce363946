// The KV cache of one sequence: per layer, K and V rows [capacity, n_kv_heads * head_dim] f32 in
// the memory of the backend that runs that layer. A session owns one; the model is shared.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"

namespace hearth {

class KvCache {
 public:
  // layer_backends[l] is the backend that runs layer l (and so holds its cache).
  static Result<KvCache> create(const std::vector<Backend*>& layer_backends, int64_t capacity,
                                int64_t kv_dim);
  KvCache() = default;
  KvCache(KvCache&& o) noexcept { *this = std::move(o); }
  KvCache& operator=(KvCache&& o) noexcept;
  KvCache(const KvCache&) = delete;
  ~KvCache();

  float* k(int64_t layer) { return layers_[size_t(layer)].k; }
  float* v(int64_t layer) { return layers_[size_t(layer)].v; }
  int64_t capacity() const { return capacity_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t n_layers() const { return int64_t(layers_.size()); }
  uint64_t bytes() const { return uint64_t(capacity_) * uint64_t(kv_dim_) * 8 * layers_.size(); }

  // Positions [0, used) hold valid entries. Truncating keeps a prefix (prompt reuse, rewinds).
  int64_t used() const { return used_; }
  void set_used(int64_t n) { used_ = n; }

  // Host copies of the first `n` positions (state save/restore).
  Status save(int64_t n, std::vector<float>* out);
  Status restore(const std::vector<float>& data, int64_t n);

 private:
  struct Layer {
    Backend* backend = nullptr;
    float* k = nullptr;
    float* v = nullptr;
  };
  std::vector<Layer> layers_;
  int64_t capacity_ = 0;
  int64_t kv_dim_ = 0;
  int64_t used_ = 0;
};

}  // namespace hearth
