// Token log-probabilities for the API's `logprobs`: log-softmax of the model's raw logits (before
// any sampling stage, as OpenAI documents), computed on the scheduler thread only for requests
// that ask, and their two wire shapes (chat's logprobs.content[], the legacy completions' parallel
// arrays with text_offset).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth::server {

struct TokenAlternative {
  int32_t id = 0;
  std::string bytes;  // the token's bytes (a byte-fallback token is one byte of a character)
  float logprob = 0;
};

struct TokenLogprob {
  TokenAlternative chosen;
  std::vector<TokenAlternative> top;  // most likely first, ties by lower id
};

// The largest top_logprobs OpenAI accepts (chat); the legacy `logprobs` allows 5.
constexpr int kMaxTopLogprobs = 20;
constexpr int kMaxLegacyLogprobs = 5;

// Log-softmax of logits[n_vocab] at `chosen`, and its `top_n` most likely tokens.
TokenLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t chosen, int top_n,
                           const Tokenizer& tokenizer);

// chat.completions: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null}.
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& tokens);
// completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}; offsets
// count bytes of the answer from *text_offset, which is advanced (a stream carries it on).
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprob>& tokens,
                                        size_t* text_offset);

}  // namespace hearth::server
