// `hearth bench --batch B`: B sequences decoded in lockstep without HTTP, each step one forward
// over B one-token segments (Phase::kDecodeBatch: the batched matmuls and attention on CUDA), so
// a serving step's device figure can be taken quickly. Row "tg<n> x B": aggregate tok/s.
#pragma once

#include "base/status.h"
#include "model/model.h"

namespace hearth::bench {

// One run: B caches each holding `depth` + 1 prompt token, then n_gen lockstep steps (token 1
// fed to every sequence: the figure is the step time, not the text), each picking its rows'
// greedy ids where the logits are (a served step's path). Returns B * n_gen / seconds.
// The caches are made once by the caller (new_batch_caches) and reused across repetitions.
// new_batch_caches: B caches of `capacity` positions and `types`, each holding a copy of the
// first `depth` positions of `filled` (a cache of the same capacity and types). Rows left
// unwritten would all read the kernel's one shared zero page, which a served cache never does.
Result<std::vector<KvCache>> new_batch_caches(const Model& m, int batch, int64_t capacity,
                                              const KvCacheTypes& types, const KvCache& filled,
                                              int64_t depth);
Result<double> batch_decode_tok_s(const Model& m, std::vector<KvCache>& caches, int n_gen,
                                  int64_t depth, ForwardScratch& scratch);

}  // namespace hearth::bench
