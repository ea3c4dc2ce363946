// Hugging Face tokenizer.json (model.type BPE, byte-level) into a BpeVocab. A new pre-tokenizer
// or normalizer type is one more branch in hf-tokenizer-json.cpp.
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/bpe-tokenizer.h"

namespace hearth {

// `source` names the file in errors ("dir/tokenizer.json: pre_tokenizer: ...").
Result<BpeVocab> parse_hf_tokenizer_json(const std::string& json_text, const std::string& source);

}  // namespace hearth
