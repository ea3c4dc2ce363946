// The API's `logprobs` (runtime/token-logprobs.h computes them): the limits on how many
// alternatives a request may ask for, and the two wire shapes (chat's logprobs.content[], the
// legacy completions' parallel arrays with text_offset).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/token-logprobs.h"

namespace hearth::server {

// The largest top_logprobs OpenAI accepts (chat); the legacy `logprobs` allows 5.
constexpr int kMaxTopLogprobs = 20;
constexpr int kMaxLegacyLogprobs = 5;

// chat.completions: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null}.
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& tokens);
// completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}; offsets
// count bytes of the answer from *text_offset, which is advanced (a stream carries it on).
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprob>& tokens,
                                        size_t* text_offset);

}  // namespace hearth::server
