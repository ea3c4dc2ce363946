// The model argument every command shares: `-m MODEL` (a GGUF file, a Hugging Face directory, or
// a Hub repo id REPO[:QUANT]) and `--repo-id REPO[:QUANT]`. Resolution to a local path lives here.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"

namespace hearth::cli {

struct ModelArg {
  std::string model;    // -m / --model
  std::string repo_id;  // --repo-id
};

// Adds -m/--model and --repo-id to a subcommand.
void add_model_options(CLI::App* cmd, ModelArg* arg);

// A local path to a GGUF file or a Hugging Face directory. A path that exists wins; otherwise a
// value shaped like ORG/NAME[:QUANT] is fetched through the Hub cache (or found there offline).
Result<std::string> resolve_model(const ModelArg& arg);

}  // namespace hearth::cli
