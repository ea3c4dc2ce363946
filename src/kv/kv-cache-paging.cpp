// KvCache's paging (pooled caches, kv/kv-pool.h): blocks taken from the pool as positions are
// used, the granules behind them committed per layer buffer, and both given back on truncation
// and destruction. A buffer's committed bytes are always a prefix of its reservation.
#include <algorithm>

#include "kv/kv-cache.h"

namespace hearth {

namespace {

uint64_t round_up(uint64_t bytes, uint64_t granule) {
  return (bytes + granule - 1) / granule * granule;
}

}  // namespace

uint64_t KvCache::commit_target(const Layer& l, uint64_t row_bytes, uint64_t reserved,
                                int64_t blocks) const {
  const uint64_t granule = l.backend->commit_granularity();
  if (granule == 0) return reserved;  // reserve_kv allocated it all
  const uint64_t whole = round_up(reserved, granule);
  if (blocks < 0) return whole;
  if (blocks == 0) return 0;
  // The blocks' rows in whole floats (Backend::copy moves floats: up to 3 bytes past a typed
  // row run). Not a row of slack as the reservation has: a block's rows fit its granules
  // (KvPool::block_tokens_for), and one row more could commit another granule per buffer.
  const uint64_t rows = uint64_t(blocks * pool_->block_tokens());
  return std::min(round_up((rows * row_bytes + 3) / 4 * 4, granule), whole);
}

bool KvCache::commit_to(Layer& l, int64_t blocks) {
  const uint64_t k = commit_target(l, uint64_t(l.k_row_bytes), l.k_reserved, blocks);
  const uint64_t v = commit_target(l, uint64_t(l.v_row_bytes), l.v_reserved, blocks);
  if (k > l.k_committed) {
    if (!l.backend->commit(l.k, l.k_committed, k - l.k_committed)) return false;
    l.k_committed = k;
  }
  if (v > l.v_committed) {
    if (!l.backend->commit(l.v, l.v_committed, v - l.v_committed)) return false;
    l.v_committed = v;
  }
  return true;
}

void KvCache::decommit_to(Layer& l, int64_t blocks) {
  const uint64_t k = commit_target(l, uint64_t(l.k_row_bytes), l.k_reserved, blocks);
  const uint64_t v = commit_target(l, uint64_t(l.v_row_bytes), l.v_reserved, blocks);
  if (k < l.k_committed) {
    l.backend->decommit(l.k, k, l.k_committed - k);
    l.k_committed = k;
  }
  if (v < l.v_committed) {
    l.backend->decommit(l.v, v, l.v_committed - v);
    l.v_committed = v;
  }
}

void KvCache::release_all() {
  for (auto& l : layers_) {
    if (l.reserved) {
      l.backend->unreserve(l.k, l.k_reserved);
      l.backend->unreserve(l.v, l.v_reserved);
    } else {
      l.backend->free(l.k);
      l.backend->free(l.v);
    }
  }
  layers_.clear();
  if (pool_) pool_->give(blocks_);
  blocks_ = 0;
}

Status KvCache::ensure(int64_t n) {
  if (n > capacity_)
    return Status::error("context is full: " + std::to_string(n) +
                         " positions needed, the context holds " + std::to_string(capacity_));
  if (!pool_) return Status::ok();
  const int64_t need = pool_->blocks_for(n);
  if (need <= blocks_) return Status::ok();
  if (!pool_->try_take(need - blocks_))
    return Status::error("KV pool is full: " + std::to_string(need - blocks_) + " more blocks of " +
                         std::to_string(pool_->block_tokens()) + " tokens needed, " +
                         std::to_string(pool_->free_blocks()) + " of " +
                         std::to_string(pool_->total_blocks()) + " free");
  for (auto& l : layers_) {
    if (l.ring_rows > 0 || !l.reserved || commit_to(l, need)) continue;
    pool_->give(need - blocks_);
    return Status::error("KV cache: out of " + l.backend->name() + " memory committing " +
                         std::to_string(n) + " positions");
  }
  blocks_ = need;
  return Status::ok();
}

void KvCache::release_unused() {
  if (!pool_) return;
  const int64_t keep = pool_->blocks_for(used_);
  if (keep >= blocks_) return;
  for (auto& l : layers_)
    if (l.ring_rows == 0 && l.reserved) decommit_to(l, keep);
  pool_->give(blocks_ - keep);
  blocks_ = keep;
}

void KvCache::prepare_first_block() const {
  if (!pool_) return;
  for (const auto& l : layers_) {
    if (l.ring_rows != 0 || !l.reserved) continue;
    if (l.k_committed == 0) l.backend->prepare_kv(l.k);
    if (l.v_committed == 0) l.backend->prepare_kv(l.v);
  }
}

uint64_t KvCache::committed_bytes() const {
  if (!pool_) return bytes();
  uint64_t total = 0;
  for (const auto& l : layers_) total += l.k_committed + l.v_committed;
  return total;
}

uint64_t KvCache::ring_bytes() const {
  uint64_t total = 0;
  for (const auto& l : layers_)
    if (l.ring_rows > 0)
      total += l.reserved ? l.k_committed + l.v_committed
                          : uint64_t(l.ring_rows) * uint64_t(l.k_row_bytes + l.v_row_bytes);
  return total;
}

}  // namespace hearth
