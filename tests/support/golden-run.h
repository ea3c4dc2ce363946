// Runs a golden's greedy continuation through an engine, the way the reference computed gen_ids
// (temperature 0, no EOS stop). Header-only so only tests that link the runtime include it.
#pragma once

#include <memory>
#include <vector>

#include "runtime/session.h"
#include "support/golden-data.h"

namespace hearth::test {

// The goldens' f32 math: an f32 KV cache (the cache types have their own golden bounds).
inline const KvCacheTypes kF32Cache{DType::F32, DType::F32};

inline Result<std::vector<int32_t>> greedy_continuation(std::shared_ptr<const Engine> engine,
                                                        const Golden& g,
                                                        const KvCacheTypes& kv_types = kF32Cache) {
  Session s(std::move(engine), 256, kv_types);
  HEARTH_TRY(s.init());
  GenerateOptions opt;
  opt.max_tokens = int32_t(g.gen_ids.size());
  opt.ignore_eos = true;
  opt.sampling.temperature = 0;
  HEARTH_ASSIGN_OR_RETURN(GenerateResult r, s.generate(g.gen_prompt, opt));
  return r.tokens;
}

}  // namespace hearth::test
