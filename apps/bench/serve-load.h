// `hearth bench --serve URL`: a load generator for a running OpenAI-compatible server (hearth
// serve, llama-server, vLLM). N clients stream /v1/completions requests whose prompts are token
// ids (a shared prefix, then ids of their own) and which each generate exactly G tokens
// (max_tokens + ignore_eos), timing every chunk. serve-stats.h aggregates and renders.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "serve-stats.h"

namespace hearth::bench {

// Checks the options (a message naming the flag when one is out of range).
Status check_serve_options(const ServeLoadOptions& o);

// The prompt of request `index`: o.shared_prefix ids every request shares, then ids drawn for
// this request, o.prompt_tokens in all, from a range every vocabulary of 1000 ids or more holds
// as ordinary tokens.
std::vector<int32_t> serve_prompt(const ServeLoadOptions& o, int index);

// Runs the load and returns each request's trace (index order). A failed request is a trace with
// ok false, not an error; the error is for options the run cannot start with.
Result<std::vector<ServeRequestTrace>> run_serve_load(
    const ServeLoadOptions& o, const std::function<void(const std::string&)>& progress = nullptr);

}  // namespace hearth::bench
