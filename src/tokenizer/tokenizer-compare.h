// Agreement of two tokenizers over a corpus (`hearth tokenize --compare`): a GGUF vocabulary
// against the tokenizer.json it was converted from, say. Extend the built-in corpus with cases
// that once disagreed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth {

// Mixed scripts, code, numbers, contractions, whitespace and newline runs, emoji, accents.
std::vector<std::string> builtin_tokenizer_corpus();
// A corpus file: each line is a text, and the whole file is one more (newlines inside).
std::vector<std::string> corpus_from_text(std::string_view file_text);

struct TokenizerMismatch {
  std::string text;
  bool add_special = false;
  std::vector<int32_t> got, want;
};
struct TokenizerComparison {
  size_t texts = 0;       // corpus entries checked (each with and without special tokens)
  size_t mismatched = 0;  // entries where the ids differ either way
  std::vector<TokenizerMismatch> first;  // up to max_report of them, corpus order
};

// Encodes every text with and without BOS/EOS by both; `reference` is the truth.
TokenizerComparison compare_tokenizers(const Tokenizer& candidate, const Tokenizer& reference,
                                       const std::vector<std::string>& corpus, size_t max_report);

}  // namespace hearth
