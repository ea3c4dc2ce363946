// WordPiece (BERT vocabularies): BERT's basic pre-tokenization (clean-up, CJK ideographs as
// words, optional lowercasing and accent stripping, splits at white space and punctuation) and
// greedy longest-match-first pieces with continuation pieces, [UNK] for a word that has none.
// Both stored forms are read: Hugging Face's ("word", "##ing") and llama.cpp's GGUF ("▁word",
// "ing", its converter's "phantom space").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/special-tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab-tokenizer.h"

namespace hearth {

struct WordPieceVocab {
  std::vector<std::string> tokens;  // as stored
  std::vector<TokenType> types;
  bool phantom_space = false;  // GGUF form: word starts carry "▁", continuations nothing
  std::string continuation_prefix = "##";  // HF form only
  bool lowercase = true;                   // BertNormalizer lowercase / do_lower_case
  bool strip_accents = true;               // defaults to `lowercase`, as in BERT
  size_t max_input_chars_per_word = 100;
  int32_t unk_id = -1, bos_id = -1, eos_id = -1, pad_id = -1;  // bos = [CLS], eos = [SEP]
  std::vector<int32_t> extra_eog_ids;
  bool add_bos = true, add_eos = true;
};

// BERT's basic tokenizer: the words WordPiece then splits, as UTF-8 strings.
std::vector<std::string> bert_pre_tokenize(std::string_view text, bool lowercase,
                                           bool strip_accents);

class WordPieceTokenizer final : public VocabTokenizer<WordPieceVocab, &WordPieceVocab::tokens> {
 public:
  static Result<std::unique_ptr<WordPieceTokenizer>> create(WordPieceVocab vocab,
                                                            const std::string& source);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special = false) const override;
  // Word starts give " word" (a decoded sequence starts with a space the caller strips),
  // continuations their text, control tokens "".
  std::string token_bytes(int32_t id) const override;
  std::string kind() const override { return "bert (WordPiece)"; }

 private:
  explicit WordPieceTokenizer(WordPieceVocab v) : VocabTokenizer(std::move(v)) {}
  Status build(const std::string& source);
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> word_start_;
  std::unordered_map<std::string, int32_t> continuation_;
  SpecialTokenMatcher special_;
};

}  // namespace hearth
