// OpenAI's `n`: a request for several choices becomes one Job per choice (same prompt, each with
// its own seed and constraint state) that the scheduler runs as a group (submit_choices). The
// response builders in openai-api.cpp walk CompletionRequest::choices.
#pragma once

#include <nlohmann/json.hpp>

#include "openai-api.h"

namespace hearth::server {

// The most choices a request may ask for.
constexpr int kMaxChoices = 8;

// Reads `n` (1..kMaxChoices, and at most the server's slots) and fills req->choices: the parsed
// job first, then a copy of it per further choice whose seed is choice_seed(seed, i) and whose
// structured-output constraint (when the request has one) is its own. false with a 400 naming
// `n` in *err.
bool expand_choices(const nlohmann::json& j, const ApiConfig& cfg, const Engine& engine,
                    CompletionRequest* req, ApiError* err);

}  // namespace hearth::server
