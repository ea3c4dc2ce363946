// KvCache allocation, moves, prefix copies between caches and host save/restore.
#include "kv/kv-cache.h"

#include <algorithm>
#include <new>

namespace hearth {

Result<KvCache> KvCache::create(const std::vector<Backend*>& layer_backends, int64_t capacity,
                                int64_t kv_dim, const std::vector<int64_t>& windows,
                                int64_t max_pass_tokens) {
  if (capacity <= 0 || kv_dim <= 0) return Status::error("KV cache: invalid size");
  if (!windows.empty() && windows.size() != layer_backends.size())
    return Status::error("KV cache: one window per layer expected");
  KvCache c;
  c.capacity_ = capacity;
  c.kv_dim_ = kv_dim;
  try {
    for (size_t i = 0; i < layer_backends.size(); ++i) {
      Layer l;
      l.backend = layer_backends[i];
      l.window = windows.empty() ? 0 : windows[i];
      // A pass of T tokens at pos0 reads keys from pos0 + 1 - window and writes up to
      // pos0 + T - 1: window + T rows hold both, so no key is overwritten while still seen.
      if (l.window > 0 && l.window + max_pass_tokens < capacity)
        l.ring_rows = l.window + std::max<int64_t>(max_pass_tokens, 1);
      const int64_t rows = l.ring_rows > 0 ? l.ring_rows : capacity;
      l.k = l.backend->alloc(rows * kv_dim);
      l.v = l.backend->alloc(rows * kv_dim);
      c.layers_.push_back(l);
    }
  } catch (const std::bad_alloc&) {
    return Status::error("KV cache: out of memory for " + std::to_string(capacity) + " positions");
  }
  return c;
}

KvCache& KvCache::operator=(KvCache&& o) noexcept {
  if (this != &o) {
    for (auto& l : layers_) {
      l.backend->free(l.k);
      l.backend->free(l.v);
    }
    layers_ = std::move(o.layers_);
    capacity_ = o.capacity_;
    kv_dim_ = o.kv_dim_;
    used_ = o.used_;
    written_ = o.written_;
    o.layers_.clear();
    o.used_ = 0;
    o.written_ = 0;
  }
  return *this;
}

KvCache::~KvCache() {
  for (auto& l : layers_) {
    l.backend->free(l.k);
    l.backend->free(l.v);
  }
}

uint64_t KvCache::bytes() const {
  uint64_t total = 0;
  for (const auto& l : layers_)
    total += uint64_t(l.ring_rows > 0 ? l.ring_rows : capacity_) * uint64_t(kv_dim_) * 8;
  return total;
}

int64_t KvCache::reusable_prefix(int64_t n) const {
  for (const auto& l : layers_) {
    // The next position n needs keys [max(0, n - window + 1), n); the ring still holds the
    // positions from written_ - ring_rows on (all of them before it wraps).
    const int64_t first_needed = std::max<int64_t>(n - l.window + 1, 0);
    if (l.ring_rows > 0 && n > 0 && first_needed < written_ - l.ring_rows) return 0;
  }
  return n;
}

Status KvCache::copy_prefix_from(const KvCache& src, int64_t n) {
  if (&src == this) return Status::error("KV cache: a cache cannot copy a prefix from itself");
  if (src.layers_.size() != layers_.size() || src.kv_dim_ != kv_dim_ || src.capacity_ != capacity_)
    return Status::error("KV cache: prefix copy between caches of different shapes");
  for (size_t i = 0; i < layers_.size(); ++i)
    if (src.layers_[i].backend != layers_[i].backend ||
        src.layers_[i].ring_rows != layers_[i].ring_rows)
      return Status::error("KV cache: prefix copy between caches of different layer " +
                           std::to_string(i) + " placement or ring");
  if (n < 0 || n > src.used_)
    return Status::error("KV cache: prefix copy of " + std::to_string(n) +
                         " positions from a cache holding " + std::to_string(src.used_));
  if (src.reusable_prefix(n) != n)
    return Status::error("KV cache: a sliding-window layer no longer holds the keys of position " +
                         std::to_string(n));
  // Backend::copy counts floats; rows are handed over as bytes so that only row_bytes() knows
  // the element type.
  const uint64_t unit = sizeof(float);
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& dst = layers_[i];
    const Layer& from = src.layers_[i];
    const uint64_t bytes = uint64_t(rows_for(dst, n)) * row_bytes();
    if (bytes == 0) continue;
    dst.backend->copy(dst.k, from.k, int64_t(bytes / unit));
    dst.backend->copy(dst.v, from.v, int64_t(bytes / unit));
  }
  used_ = n;
  // A ring's rows now carry src's history: rows src overwrote after position n are overwritten
  // here too, so a later rewind must see src's high-water mark.
  written_ = std::max(n, src.written_);
  return Status::ok();
}

// The saved form: per layer, K then V of the rows that hold positions [0, n), in row order (a
// ring layer's rows as they are, which restore puts back in the same rows).
Status KvCache::save(int64_t n, std::vector<float>* out) {
  if (n < 0 || n > used_) return Status::error("KV cache: cannot save beyond used positions");
  if (reusable_prefix(n) != n)
    return Status::error("KV cache: a sliding-window layer no longer holds the keys of position " +
                         std::to_string(n));
  size_t total = 0;
  for (const auto& l : layers_) total += size_t(rows_for(l, n) * kv_dim_) * 2;
  out->assign(total, 0.0f);
  float* dst = out->data();
  for (auto& l : layers_) {
    const int64_t per = rows_for(l, n) * kv_dim_;
    l.backend->download(dst, l.k, per);
    l.backend->download(dst + per, l.v, per);
    dst += 2 * per;
  }
  return Status::ok();
}

Status KvCache::restore(const std::vector<float>& data, int64_t n) {
  size_t total = 0;
  for (const auto& l : layers_) total += size_t(rows_for(l, std::max<int64_t>(n, 0)) * kv_dim_) * 2;
  if (n < 0 || n > capacity_ || data.size() != total)
    return Status::error("KV cache: saved state does not match this cache's shape");
  const float* src = data.data();
  for (auto& l : layers_) {
    const int64_t per = rows_for(l, n) * kv_dim_;
    l.backend->upload(l.k, src, per);
    l.backend->upload(l.v, src + per, per);
    src += 2 * per;
  }
  used_ = n;
  written_ = n;
  return Status::ok();
}

}  // namespace hearth
