// The KV pool: how many cache positions all sequences together may hold, counted in blocks of a
// fixed number of tokens. A KvCache made from a pool takes blocks as its sequence grows (before
// a forward pass writes them) and gives them back when it is truncated, reset or destroyed, so
// total context is the pool, not sequences x context. Blocks are accounting, not addresses:
// each cache keeps its own contiguous reserved range per layer (Backend::reserve_kv) and
// commits physical memory behind the positions its blocks cover, so the attention kernels
// address position p at base + p * row as with an eagerly allocated cache.
//
// Block size rule (block_tokens_for): the most positions, a multiple of 16, whose rows fit in
// one commit granule of every paged layer buffer (CPU: a 4 KiB page; CUDA: the driver's
// granularity, usually 2 MiB), and at least 16. So n blocks commit at most n granules a buffer,
// exactly n where the rows divide a granule (a 7B f16 cache: 256 positions of 8 KiB rows), and
// the memory a cache holds beyond its blocks is under one granule per buffer. (Rounding up
// instead gave q8_0 rows of 4,352 bytes blocks of 496 positions: two 2 MiB granules a buffer
// for a request's first block, twice an f16 cache's for a short request, and a second granule
// that mapping ahead, one granule a buffer, does not cover.) Sliding-window ring layers are
// bounded by their window: they are committed whole when the cache is made and are not counted
// in blocks (KvCache::ring_bytes()).
//
// Thread-safe: the scheduler thread, sessions on other threads and /metrics share one pool.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>

namespace hearth {

class KvPool {
 public:
  // A pool of ceil(total_tokens / block_tokens) blocks (block_tokens >= 1).
  static std::shared_ptr<KvPool> create(int64_t total_tokens, int64_t block_tokens);
  // A pool with no limit on its blocks (CLI and C API sessions: they commit as they grow and
  // their context size is their only bound).
  static std::shared_ptr<KvPool> unbounded(int64_t block_tokens) {
    return create(kUnbounded, block_tokens);
  }
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max() / 4;

  // One paged buffer: its backend's commit granularity (0: not paged) and its row bytes.
  struct Buffer {
    uint64_t granularity = 0;
    uint64_t row_bytes = 0;
  };
  static int64_t block_tokens_for(std::span<const Buffer> buffers);
  static constexpr int64_t kMinBlockTokens = 16;

  int64_t block_tokens() const { return block_tokens_; }
  int64_t total_blocks() const { return total_blocks_; }
  int64_t used_blocks() const { return used_.load(); }
  int64_t free_blocks() const { return total_blocks_ - used_.load(); }
  bool bounded() const { return total_blocks_ < kUnbounded / block_tokens_; }
  // Blocks that hold positions [0, n).
  int64_t blocks_for(int64_t n) const { return (n + block_tokens_ - 1) / block_tokens_; }

  // Takes n blocks if that many are free (all or none).
  bool try_take(int64_t n);
  void give(int64_t n);

 private:
  KvPool(int64_t total_blocks, int64_t block_tokens)
      : block_tokens_(block_tokens), total_blocks_(total_blocks) {}
  const int64_t block_tokens_;
  const int64_t total_blocks_;
  std::atomic<int64_t> used_{0};
};

}  // namespace hearth
