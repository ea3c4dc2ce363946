// Which files of a repo a pull fetches: the GGUF named by :QUANT (all parts of a split GGUF), or
// a safetensors model's config, weights, shard index and tokenizer files, or --include globs.
// A new model format adds a rule in select_files and keeps the others untouched.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::hub {

struct Selection {
  std::vector<std::string> files;  // repo-relative paths to fetch, sorted
  std::string primary;             // the GGUF to load (first part when split); "" = the folder
};

// listing: every file of the repo at one revision. quant: "" or a tag like Q4_K_M.
// include: glob patterns (fnmatch rules, '*' also crosses '/'); when given they choose the files
// (plus the :QUANT file when both are given).
Result<Selection> select_files(const std::vector<std::string>& listing, const std::string& quant,
                               const std::vector<std::string>& include, const std::string& repo_id);

// fnmatch-style matching with *, ? and [...] classes.
bool glob_match(const std::string& pattern, const std::string& text);

// The quantization tag in a GGUF file name ("llama-2-7b.Q4_K_M.gguf" -> "Q4_K_M"), upper-case;
// "" when none is recognisable.
std::string gguf_quant_tag(const std::string& path);

// True when the name (case-insensitively) contains quant as a whole tag, bounded by
// start/end or one of "-._/".
bool name_has_quant(const std::string& path, const std::string& quant);

}  // namespace hearth::hub
