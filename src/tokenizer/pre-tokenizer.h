// Byte-level BPE pre-tokenizers: the published split patterns (GPT-2, Llama 3, Qwen2, digit
// isolation) as hand-written matchers over code points. Add a pattern: a PreTokPattern value,
// its matcher in pre-tokenizer.cpp, and its names in the two look-up functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth {

enum class PreTokPattern {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,   // as kLlama3 with \p{N} (one digit per piece)
  kDigits,  // \p{N}: every number character on its own
};

// A pipeline of patterns; each splits the pieces of the previous one ("Isolated": both the
// matches and the text between them stay pieces).
using PreTokenizer = std::vector<PreTokPattern>;

// GGUF `tokenizer.ggml.pre` names (llama.cpp's converter), nullopt when unknown.
std::optional<PreTokenizer> pre_tokenizer_for_gguf(std::string_view pre);
// A Split pre-tokenizer's regex string from tokenizer.json, nullopt when unknown.
std::optional<PreTokPattern> pre_tok_pattern_for_regex(std::string_view regex);

// Splits `text` into byte ranges [begin, end). Invalid UTF-8 bytes are single code points that
// are neither letters, numbers nor white space, so the pieces always cover the input exactly.
std::vector<std::pair<size_t, size_t>> pre_tokenize(const PreTokenizer& pre, std::string_view text);

}  // namespace hearth
