// KvCache allocation, moves and host save/restore.
#include "kv/kv-cache.h"

#include <new>

namespace hearth {

Result<KvCache> KvCache::create(const std::vector<Backend*>& layer_backends, int64_t capacity,
                                int64_t kv_dim) {
  if (capacity <= 0 || kv_dim <= 0) return Status::error("KV cache: invalid size");
  KvCache c;
  c.capacity_ = capacity;
  c.kv_dim_ = kv_dim;
  try {
    for (Backend* b : layer_backends) {
      Layer l;
      l.backend = b;
      l.k = b->alloc(capacity * kv_dim);
      l.v = b->alloc(capacity * kv_dim);
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
    o.layers_.clear();
    o.used_ = 0;
  }
  return *this;
}

KvCache::~KvCache() {
  for (auto& l : layers_) {
    l.backend->free(l.k);
    l.backend->free(l.v);
  }
}

Status KvCache::save(int64_t n, std::vector<float>* out) {
  if (n < 0 || n > used_) return Status::error("KV cache: cannot save beyond used positions");
  const int64_t per = n * kv_dim_;
  out->assign(size_t(per) * 2 * layers_.size(), 0.0f);
  float* dst = out->data();
  for (auto& l : layers_) {
    l.backend->download(dst, l.k, per);
    l.backend->download(dst + per, l.v, per);
    dst += 2 * per;
  }
  return Status::ok();
}

Status KvCache::restore(const std::vector<float>& data, int64_t n) {
  const int64_t per = n * kv_dim_;
  if (n < 0 || n > capacity_ || data.size() != size_t(per) * 2 * layers_.size())
    return Status::error("KV cache: saved state does not match this cache's shape");
  const float* src = data.data();
  for (auto& l : layers_) {
    l.backend->upload(l.k, src, per);
    l.backend->upload(l.v, src + per, per);
    src += 2 * per;
  }
  used_ = n;
  return Status::ok();
}

}  // namespace hearth
