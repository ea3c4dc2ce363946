// Byte-level BPE pre-tokenizers as data: each GGUF `tokenizer.ggml.pre` name (llama.cpp's
// converter) is a list of split patterns in the regex dialect of split-regex.h, the patterns as
// the models' tokenizer.json files publish them. Add a pre-tokenizer: a row in kPreTokenizers
// (pre-tokenizer.cpp) and a test of its splits in tests/unit/tokenizer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/split-regex.h"

namespace hearth {

// A pipeline of patterns; each splits the pieces of the previous one as Hugging Face's
// Split(behavior="Isolated") does: both the matches and the text between them stay pieces.
struct PreTokenizer {
  std::vector<SplitRegex> splits;
  // llama.cpp's per-name defaults: a whole pre-token found in the vocabulary is one id
  // (tokenizer.json's ignore_merges), and BOS is added when the GGUF does not say.
  bool ignore_merges = false;
  bool add_bos = false;

  std::vector<std::string> patterns() const;
  // Same patterns in the same order (the flags are the GGUF name's, not the split's).
  bool operator==(const PreTokenizer& o) const { return patterns() == o.patterns(); }
};

// GGUF `tokenizer.ggml.pre` names, nullopt when unknown.
std::optional<PreTokenizer> pre_tokenizer_for_gguf(std::string_view pre);
// Every name pre_tokenizer_for_gguf knows (for `hearth convert`'s reverse look-up and tests).
std::vector<std::string_view> known_pre_tokenizer_names();
// The GPT-2 pattern, which ByteLevel(use_regex=true) applies.
std::string_view gpt2_split_pattern();

// Splits `text` into byte ranges [begin, end). Invalid UTF-8 bytes are single code points that
// are neither letters, numbers nor white space, so the pieces always cover the input exactly.
std::vector<std::pair<size_t, size_t>> pre_tokenize(const PreTokenizer& pre, std::string_view text);

}  // namespace hearth
