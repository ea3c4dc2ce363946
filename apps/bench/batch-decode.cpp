// The lockstep batch decode row of `hearth bench` (batch-decode.h).
#include "batch-decode.h"

#include <chrono>

namespace hearth::bench {

Result<std::vector<KvCache>> new_batch_caches(const Model& m, int batch, int64_t capacity,
                                              const KvCacheTypes& types, const KvCache& filled,
                                              int64_t depth) {
  std::vector<KvCache> caches;
  caches.reserve(size_t(batch));
  for (int i = 0; i < batch; ++i) {
    HEARTH_ASSIGN_OR_RETURN(KvCache kv, m.new_kv_cache(capacity, types));
    if (depth > 0) HEARTH_TRY(kv.copy_prefix_from(filled, depth));
    caches.push_back(std::move(kv));
  }
  return caches;
}

Result<double> batch_decode_tok_s(const Model& m, std::vector<KvCache>& caches, int n_gen,
                                  int64_t depth, ForwardScratch& scratch) {
  const int B = int(caches.size());
  std::vector<float> logits;
  // Each sequence: depth rows (left as a previous fill wrote them) and one prompt token.
  for (KvCache& kv : caches) {
    kv.set_used(depth);
    HEARTH_TRY(m.prefill(kv, {1}, scratch, &logits));
  }
  const std::vector<int32_t> tokens(static_cast<size_t>(B), 1);
  std::vector<BatchSegment> segs(static_cast<size_t>(B));
  // Each step's rows are picked greedily where the logits are, and only the ids come back, as
  // `hearth serve` steps its greedy requests: downloading B full rows instead (8 MB a step at
  // 64 sequences of a 32,000-token vocabulary) is host traffic no served step has.
  const std::vector<uint8_t> no_rows(static_cast<size_t>(B), 0);
  std::vector<int32_t> picked;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < n_gen; ++step) {
    for (int i = 0; i < B; ++i) segs[size_t(i)] = {&caches[size_t(i)], caches[size_t(i)].used(), 1};
    // (the ids' download syncs each step)
    HEARTH_TRY(m.forward_picks(tokens, segs, scratch, no_rows, {}, &logits, &picked));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return double(B) * n_gen / s;
}

}  // namespace hearth::bench
