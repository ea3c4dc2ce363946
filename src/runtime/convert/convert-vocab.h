// Tokenizer metadata for `hearth convert`: tokenizer.ggml.* keys from a SentencePiece
// tokenizer.model ("llama") or a byte-level BPE tokenizer.json ("gpt2"), as llama.cpp writes them.
#pragma once

#include <optional>
#include <string>

#include "base/status.h"
#include "formats/gguf.h"
#include "formats/hf-config.h"

namespace hearth::convert {

// Reads the tokenizer files in `dir`; ids missing from them come from config.json (`cfg`).
Status add_tokenizer_metadata(const std::string& dir, const HfConfig& cfg,
                              const std::optional<HfTokenizerConfig>& tok_cfg, GgufWriter& w);

}  // namespace hearth::convert
