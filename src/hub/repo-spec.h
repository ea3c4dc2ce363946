// A model named on the command line as ORG/NAME[:QUANT], and its folder name in the HF cache.
// Only model repos are handled; datasets/spaces would add a kind prefix here.
#pragma once

#include <string>

#include "base/status.h"

namespace hearth::hub {

struct RepoSpec {
  std::string repo_id;  // ORG/NAME
  std::string quant;    // optional GGUF quantization tag, e.g. Q4_K_M (matched case-insensitively)
};

// Parses "ORG/NAME" or "ORG/NAME:QUANT"; rejects ids huggingface_hub would reject (characters
// outside [A-Za-z0-9._-], "--" or "..", leading/trailing '-' or '.', longer than 96).
Result<RepoSpec> parse_repo_spec(const std::string& text);

// True when text has the shape of a repo id (so a missing local path is not mistaken for one).
bool looks_like_repo_spec(const std::string& text);

// "models--ORG--NAME": the repo's folder in the cache.
std::string repo_folder_name(const std::string& repo_id);

// True for a full 40-hex commit id.
bool is_commit_hash(const std::string& s);

}  // namespace hearth::hub
