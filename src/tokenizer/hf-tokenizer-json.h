// Hugging Face tokenizer.json (model.type BPE, byte-level; or WordPiece) into a BpeVocab or a
// WordPieceVocab. A new pre-tokenizer or normalizer type is one more branch in
// hf-tokenizer-json.cpp.
#pragma once

#include <optional>
#include <string>

#include "base/status.h"
#include "tokenizer/bpe-tokenizer.h"
#include "tokenizer/wordpiece-tokenizer.h"

namespace hearth {

// `source` names the file in errors ("dir/tokenizer.json: pre_tokenizer: ...").
Result<BpeVocab> parse_hf_tokenizer_json(const std::string& json_text, const std::string& source);

// Either model: exactly one of the two is set.
struct HfTokenizerModel {
  std::optional<BpeVocab> bpe;
  std::optional<WordPieceVocab> wordpiece;
};
Result<HfTokenizerModel> parse_hf_tokenizer_json_model(const std::string& json_text,
                                                       const std::string& source);

}  // namespace hearth
