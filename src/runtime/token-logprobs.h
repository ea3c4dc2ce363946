// A generated token's log-probability and its most likely alternatives: log-softmax of the
// model's raw logits (before any sampling stage, as OpenAI documents), computed on the
// scheduler thread only for requests that ask. The API's wire shapes are apps/server/logprobs.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth {

struct TokenAlternative {
  int32_t id = 0;
  std::string bytes;  // the token's bytes (a byte-fallback token is one byte of a character)
  float logprob = 0;
};

struct TokenLogprob {
  TokenAlternative chosen;
  std::vector<TokenAlternative> top;  // most likely first, ties by lower id
};

// Log-softmax of logits[n_vocab] at `chosen`, and its `top_n` most likely tokens.
TokenLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t chosen, int top_n,
                           const Tokenizer& tokenizer);

}  // namespace hearth
