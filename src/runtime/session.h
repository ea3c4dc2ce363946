// A Session is one conversation with an Engine: its own KV cache, scratch, sampler and token
// history. Prompts that share a prefix with the history reuse the cached positions.
// Not thread-safe itself; use one session per thread (the Engine is shared).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"
#include "sampling/sampler.h"
#include "sampling/token-constraint.h"

namespace hearth {

struct GenerateOptions {
  int32_t max_tokens = -1;  // -1: until EOS or the context is full
  bool ignore_eos = false;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  SamplingParams sampling;
  // Constrained decoding (runtime/structured-output.h makes one from a grammar or a JSON
  // Schema): masks the logits before the sampler chain and follows every picked token. When it
  // is complete generation ends with "stop"; end-of-generation tokens are allowed only where it
  // may end, and end generation even with ignore_eos. One object per generate() call.
  std::shared_ptr<TokenConstraint> constraint;
  // Added to the logits before the constraint and the sampler chain (OpenAI's logit_bias);
  // ids outside the vocabulary are ignored.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;     // tokens in the prompt
  int64_t prompt_evaluated = 0;  // of which actually computed (the rest came from the cache)
  int64_t generated_tokens = 0;
  double prompt_ms = 0;
  double gen_ms = 0;          // time of generated tokens after the first (decode)
  double ttft_ms = 0;         // prompt processing + first sampled token
  std::string finish_reason;  // "stop" (EOS or stop string), "length", "cancelled", "context"
  double prompt_tok_s() const { return prompt_ms > 0 ? prompt_evaluated * 1000.0 / prompt_ms : 0; }
  double gen_tok_s() const {
    return gen_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1000.0 / gen_ms : 0;
  }
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (a stop string's tokens included, EOS excluded)
  std::string text;             // generated text, stop string removed
  GenerateStats stats;
};

// Called with each new token and the text it completes (may be "" while UTF-8 or a possible stop
// string is held back). Return false to stop generating.
using TokenCallback = std::function<bool(int32_t id, const std::string& text_piece)>;

class Session {
 public:
  // kv_types: the element types of the session's KV cache (f16 by default, as llama.cpp).
  Session(std::shared_ptr<const Engine> engine, int64_t n_ctx, const KvCacheTypes& kv_types = {});
  Status init();  // allocates the KV cache; call once

  const Engine& engine() const { return *engine_; }
  int64_t n_ctx() const { return n_ctx_; }
  const std::vector<int32_t>& history() const { return history_; }
  void reset();  // forget the conversation (the cache is reused)

  // Evaluates `prompt` (reusing a common prefix with the history) and generates.
  Result<GenerateResult> generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                  const TokenCallback& on_token = nullptr);

  // Low level: evaluate tokens and get the logits of the last one (prefix reuse included).
  Status evaluate(const std::vector<int32_t>& prompt, std::vector<float>* last_logits,
                  int64_t* evaluated = nullptr);
  Status decode_one(int32_t token, std::vector<float>* logits);

  // Logits for every position of a sequence (fresh context). [T, n_vocab].
  Result<std::vector<float>> all_logits(const std::vector<int32_t>& tokens);

  // Save/restore the conversation (tokens + KV) for resuming later.
  // The conversation and its KV rows in the cache's element types (KvCache::save). Restoring
  // takes rows saved with `saved_types` and needs a session whose cache has the same types
  // (an error naming both otherwise: converting rows would change the logits the state was
  // saved to continue from).
  Status save_state(std::vector<int32_t>* tokens, std::vector<uint8_t>* kv);
  Status restore_state(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& kv,
                       const KvCacheTypes& saved_types);
  const KvCacheTypes& kv_types() const { return kv_types_; }
  // Bytes save_state writes for n positions.
  uint64_t saved_kv_bytes(int64_t n) const { return kv_.saved_bytes(n); }

 private:
  std::shared_ptr<const Engine> engine_;
  int64_t n_ctx_;
  KvCacheTypes kv_types_;
  KvCache kv_;
  ForwardScratch scratch_;
  std::vector<int32_t> history_;
};

}  // namespace hearth
