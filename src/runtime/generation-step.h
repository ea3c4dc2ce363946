// One generated token's bookkeeping, the same for every generate loop: Session::generate (and so
// `hearth run`, `hearth chat` and the C API) and the server's batched scheduler, one per slot.
// Around the sampler: the logit bias and the constraint's budget and mask before it; after it,
// the constraint follows the token, end-of-generation, UTF-8 streaming, stop strings, the
// constraint's completion and max_tokens decide the text released and the finish reason.
// The loops keep what differs between them: how logits are computed, the context's end, and
// what a token's text is handed to.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "runtime/session.h"
#include "runtime/stop-strings.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

// The device pick (Backend::PickRule) that draws as a Sampler of these parameters does, with the
// seed it resolved (Sampler::seed()).
Backend::PickRule device_pick_rule(const SamplingParams& p, uint64_t seed);

class GenerationStep {
 public:
  // `opt` is copied (its constraint is shared: one constraint per generation).
  GenerationStep(const Tokenizer& tok, const GenerateOptions& opt);

  // Picks the next token from one row of n_vocab logits, which stay as they are (bias and mask
  // work on a copy). ctx_left: positions the cache still holds, this token's included.
  int32_t pick(const float* logits, int32_t n_vocab, const std::vector<int32_t>& history,
               int64_t ctx_left);

  // Follows a picked token (from pick() or a backend's own argmax). Sets *text to what it
  // releases for streaming (may be empty while UTF-8 bytes or a possible stop string are held
  // back). Returns whether generation goes on; when not, finish_reason() says why: "stop" (an
  // end token, a stop string, a complete constraint), "length" (max_tokens) or "error" (the
  // constraint refused the token: error()).
  bool take(int32_t id, std::string* text);
  // Whether the last take() added its token to the output (false for an end token or an error).
  bool emitted() const { return emitted_; }

  // At the end: the text still held back (nothing after a stop string or an error).
  std::string flush();

  int64_t generated() const { return generated_; }
  const std::string& finish_reason() const { return finish_reason_; }
  const Status& error() const { return error_; }
  bool stop_string_matched() const { return stops_.matched(); }

  // The device pick that draws as pick() does (same chain and parameters, the resolved seed),
  // for a backend that samples inside a chained decode; nullopt when pick() does more than the
  // sampler chain (a constraint, a logit bias). Plain greedy is a rule too (greedy()).
  std::optional<Backend::PickRule> device_rule() const;

 private:
  const Tokenizer& tok_;
  GenerateOptions opt_;
  Sampler sampler_;
  StreamDecoder decoder_;
  StopStringFilter stops_;
  std::vector<float> row_;  // the logits row with bias and mask applied (scratch)
  int64_t generated_ = 0;
  bool emitted_ = false;
  std::string finish_reason_ = "length";
  Status error_;
};

}  // namespace hearth
