// KvPool: the block counters and the block size rule.
#include "kv/kv-pool.h"

#include <algorithm>

namespace hearth {

std::shared_ptr<KvPool> KvPool::create(int64_t total_tokens, int64_t block_tokens) {
  block_tokens = std::max<int64_t>(block_tokens, 1);
  total_tokens = std::max<int64_t>(total_tokens, 0);
  const int64_t blocks = total_tokens >= kUnbounded
                             ? kUnbounded / block_tokens
                             : (total_tokens + block_tokens - 1) / block_tokens;
  return std::shared_ptr<KvPool>(new KvPool(blocks, block_tokens));
}

int64_t KvPool::block_tokens_for(std::span<const Buffer> buffers) {
  int64_t tokens = 0;  // none of the buffers pages yet
  for (const Buffer& b : buffers) {
    if (b.granularity == 0 || b.row_bytes == 0) continue;
    const int64_t fit = std::max(
        int64_t(b.granularity / b.row_bytes) / kMinBlockTokens * kMinBlockTokens, kMinBlockTokens);
    tokens = tokens == 0 ? fit : std::min(tokens, fit);
  }
  return tokens == 0 ? kMinBlockTokens : tokens;
}

bool KvPool::try_take(int64_t n) {
  if (n <= 0) return true;
  int64_t used = used_.load();
  do {
    if (used + n > total_blocks_) return false;
  } while (!used_.compare_exchange_weak(used, used + n));
  return true;
}

void KvPool::give(int64_t n) {
  if (n > 0) used_.fetch_sub(n);
}

}  // namespace hearth
