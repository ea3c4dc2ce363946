// KvCache allocation (typed rows), moves, prefix copies between caches, the cache type names and
// host save/restore.
#include "kv/kv-cache.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "base/checked-math.h"
#include "base/log.h"

namespace hearth {

namespace {

// Backend memory comes in floats: a typed layer takes the floats its bytes round up to.
int64_t floats_for(int64_t bytes) {
  return (bytes + 3) / 4;
}

}  // namespace

std::optional<DType> parse_kv_type(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "q8_0") return DType::Q8_0;
  return std::nullopt;
}

const char* kv_type_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::Q8_0:
      return "q8_0";
    default:
      return "?";
  }
}

uint64_t KvCache::bytes_per_position(int64_t kv_dim, const KvCacheTypes& types) {
  return uint64_t(kernels::kv_row_bytes(types.k, kv_dim) + kernels::kv_row_bytes(types.v, kv_dim));
}

Result<KvCache> KvCache::create(const std::vector<Backend*>& layer_backends, int64_t capacity,
                                int64_t kv_dim, const std::vector<int64_t>& windows,
                                int64_t max_pass_tokens, const KvCacheTypes& types,
                                std::shared_ptr<KvPool> pool) {
  if (capacity <= 0 || kv_dim <= 0) return Status::error("KV cache: invalid size");
  // Buffers are sized from capacity below (a row of slack included): a capacity whose bytes
  // cannot be counted (a file's context_length may say 2^63) is refused before any sum wraps.
  // (f32 rows are the widest a layer can hold: what a backend without `types` keeps.)
  const uint64_t widest = bytes_per_position(kv_dim, {DType::F32, DType::F32});
  if (capacity > kMaxPositions || !checked_mul(uint64_t(capacity) + 1, widest))
    return Status::error("KV cache: " + std::to_string(capacity) + " positions is more than " +
                         std::to_string(kMaxPositions) + " a cache can hold");
  if (!windows.empty() && windows.size() != layer_backends.size())
    return Status::error("KV cache: one window per layer expected");
  for (const auto& [what, t] : {std::pair{"K", types.k}, std::pair{"V", types.v}}) {
    if (!kernels::is_kv_type(t))
      return Status::error(std::string("KV cache: ") + what + " type " + dtype_name(t) +
                           " is not a cache type (" + kKvTypeChoices + ")");
    if (t == DType::Q8_0 && kv_dim % 32 != 0)
      return Status::error(std::string("KV cache: ") + what +
                           " type q8_0 needs rows of whole 32-value blocks; kv_dim is " +
                           std::to_string(kv_dim));
  }
  KvCache c;
  c.capacity_ = capacity;
  c.kv_dim_ = kv_dim;
  c.types_ = types;
  try {
    for (size_t i = 0; i < layer_backends.size(); ++i) {
      Layer l;
      l.backend = layer_backends[i];
      l.window = windows.empty() ? 0 : windows[i];
      // A pass of T tokens at pos0 reads keys from pos0 + 1 - window and writes up to
      // pos0 + T - 1: window + T rows hold both, so no key is overwritten while still seen.
      if (l.window > 0 && l.window + max_pass_tokens < capacity)
        l.ring_rows = l.window + std::max<int64_t>(max_pass_tokens, 1);
      l.k_type = l.backend->supports_kv_type(types.k) ? types.k : DType::F32;
      l.v_type = l.backend->supports_kv_type(types.v) ? types.v : DType::F32;
      if (KvCacheTypes{l.k_type, l.v_type} != types) {
        static std::atomic<bool> told{false};
        if (!told.exchange(true))
          log_info("KV cache: the " + l.backend->name() + " backend keeps f32 K/V rows (it has " +
                   "no " + kv_type_name(types.k) + "/" + kv_type_name(types.v) + " cache kernels)");
      }
      l.k_row_bytes = kernels::kv_row_bytes(l.k_type, kv_dim);
      l.v_row_bytes = kernels::kv_row_bytes(l.v_type, kv_dim);
      const int64_t rows = c.rows_allocated(l);
      if (pool) {
        // Whole floats plus a row of slack: Backend::copy and the kernels may touch up to a few
        // bytes past the last row (see copy_prefix_from), which must lie inside the range.
        l.reserved = true;
        l.k_reserved = uint64_t(floats_for((rows + 1) * l.k_row_bytes)) * 4;
        l.v_reserved = uint64_t(floats_for((rows + 1) * l.v_row_bytes)) * 4;
        l.k = static_cast<float*>(l.backend->reserve_kv(l.k_reserved));
        try {
          l.v = static_cast<float*>(l.backend->reserve_kv(l.v_reserved));
        } catch (...) {
          l.backend->unreserve(l.k, l.k_reserved);
          throw;
        }
      } else {
        l.k = l.backend->alloc(floats_for(rows * l.k_row_bytes));
        try {
          l.v = l.backend->alloc(floats_for(rows * l.v_row_bytes));
        } catch (...) {
          l.backend->free(l.k);
          throw;
        }
      }
      c.layers_.push_back(l);
      // A ring is bounded by its window: committed whole now, outside the pool's blocks.
      if (l.ring_rows > 0 && l.reserved && !c.commit_to(c.layers_.back(), -1))
        throw std::bad_alloc();
    }
  } catch (const std::bad_alloc&) {
    return Status::error("KV cache: out of memory for " + std::to_string(capacity) + " positions");
  }
  c.pool_ = std::move(pool);
  return c;
}

KvCache& KvCache::operator=(KvCache&& o) noexcept {
  if (this != &o) {
    release_all();
    layers_ = std::move(o.layers_);
    pool_ = std::move(o.pool_);
    blocks_ = o.blocks_;
    types_ = o.types_;
    capacity_ = o.capacity_;
    kv_dim_ = o.kv_dim_;
    used_ = o.used_;
    written_ = o.written_;
    o.layers_.clear();
    o.pool_.reset();
    o.blocks_ = 0;
    o.used_ = 0;
    o.written_ = 0;
  }
  return *this;
}

KvCache::~KvCache() {
  release_all();
}

uint64_t KvCache::bytes() const {
  uint64_t total = 0;
  for (const auto& l : layers_)
    total += uint64_t(rows_allocated(l)) * uint64_t(l.k_row_bytes + l.v_row_bytes);
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
        src.layers_[i].ring_rows != layers_[i].ring_rows ||
        src.layers_[i].k_type != layers_[i].k_type || src.layers_[i].v_type != layers_[i].v_type)
      return Status::error("KV cache: prefix copy between caches of different layer " +
                           std::to_string(i) + " placement, ring or element types");
  if (n < 0 || n > src.used_)
    return Status::error("KV cache: prefix copy of " + std::to_string(n) +
                         " positions from a cache holding " + std::to_string(src.used_));
  if (src.reusable_prefix(n) != n)
    return Status::error("KV cache: a sliding-window layer no longer holds the keys of position " +
                         std::to_string(n));
  HEARTH_TRY(ensure(n));
  // Backend::copy moves whole floats: a typed row run may round up by up to 3 bytes, which lie
  // inside the allocation (floats_for) in rows at or beyond n, holding no valid position.
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& dst = layers_[i];
    const Layer& from = src.layers_[i];
    const int64_t rows = rows_for(dst, n);
    if (rows == 0) continue;
    dst.backend->copy(dst.k, from.k, floats_for(rows * dst.k_row_bytes));
    dst.backend->copy(dst.v, from.v, floats_for(rows * dst.v_row_bytes));
  }
  used_ = n;
  // A ring's rows now carry src's history: rows src overwrote after position n are overwritten
  // here too, so a later rewind must see src's high-water mark.
  written_ = std::max(n, src.written_);
  return Status::ok();
}

uint64_t KvCache::saved_bytes(int64_t n) const {
  uint64_t total = 0;
  for (const auto& l : layers_)
    total +=
        uint64_t(rows_for(l, std::max<int64_t>(n, 0))) * uint64_t(l.k_row_bytes + l.v_row_bytes);
  return total;
}

// The saved form: per layer, K then V of the rows that hold positions [0, n), in row order and
// in the layer's element type (a ring layer's rows as they are, which restore puts back in the
// same rows). Backends move whole floats, so a transfer may round up to 3 bytes past the rows:
// they lie inside the allocation, in rows at or beyond n, which hold no valid position.
Status KvCache::save(int64_t n, std::vector<uint8_t>* out) {
  if (n < 0 || n > used_) return Status::error("KV cache: cannot save beyond used positions");
  if (reusable_prefix(n) != n)
    return Status::error("KV cache: a sliding-window layer no longer holds the keys of position " +
                         std::to_string(n));
  out->assign(size_t(saved_bytes(n)), 0);
  uint8_t* dst = out->data();
  std::vector<float> staging;
  auto take = [&](Backend* be, const float* src, int64_t bytes) {
    staging.resize(size_t(floats_for(bytes)));
    be->download(staging.data(), src, floats_for(bytes));
    std::memcpy(dst, staging.data(), size_t(bytes));
    dst += bytes;
  };
  for (auto& l : layers_) {
    take(l.backend, l.k, rows_for(l, n) * l.k_row_bytes);
    take(l.backend, l.v, rows_for(l, n) * l.v_row_bytes);
  }
  return Status::ok();
}

Status KvCache::restore(const std::vector<uint8_t>& data, int64_t n) {
  if (n < 0 || n > capacity_ || data.size() != saved_bytes(n))
    return Status::error("KV cache: saved state does not match this cache's shape");
  HEARTH_TRY(ensure(n));
  const uint8_t* src = data.data();
  std::vector<float> staging;
  auto put = [&](Backend* be, float* dst, int64_t bytes) {
    if (bytes == 0) return;
    // The rounded-up tail float keeps the device's bytes past the rows (read first).
    staging.assign(size_t(floats_for(bytes)), 0.0f);
    if (bytes % 4 != 0)
      be->download(staging.data() + staging.size() - 1, dst + staging.size() - 1, 1);
    std::memcpy(staging.data(), src, size_t(bytes));
    be->upload(dst, staging.data(), floats_for(bytes));
    src += bytes;
  };
  for (auto& l : layers_) {
    put(l.backend, l.k, rows_for(l, n) * l.k_row_bytes);
    put(l.backend, l.v, rows_for(l, n) * l.v_row_bytes);
  }
  used_ = n;
  written_ = n;
  return Status::ok();
}

}  // namespace hearth
