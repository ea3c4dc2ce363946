// Byte-level BPE (GPT-2, Llama 3, Qwen2...): the vocabulary as data (BpeVocab, filled from GGUF
// metadata or tokenizer.json) and the tokenizer. New pre-tokenizers go in pre-tokenizer.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre-tokenizer.h"
#include "tokenizer/special-tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab-tokenizer.h"

namespace hearth {

struct BpeVocab {
  std::vector<std::string> tokens;  // normal tokens in byte-to-unicode form ("Ġthe")
  std::vector<TokenType> types;
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  PreTokenizer pre;
  bool add_prefix_space = false;  // ByteLevel(add_prefix_space=true)
  bool ignore_merges = false;     // a whole pre-token found in the vocabulary is one id
  bool nfc = false;               // tokenizer.json normalizer NFC (Qwen2)
  int32_t unk_id = -1, bos_id = -1, eos_id = -1, pad_id = -1;
  // What encoding emits for a byte the vocabulary has no token for: tokenizer.json's
  // model.unk_token, as Hugging Face's BPE model does; -1 drops the byte, as llama.cpp does for
  // every GGUF (whose unknown_token_id is the vocabulary's, often <|endoftext|>, not the
  // model's: emitting it would end the text inside a prompt).
  int32_t model_unk_id = -1;
  std::vector<int32_t> extra_eog_ids;
  bool add_bos = false, add_eos = false;
};

// The GPT-2 byte <-> printable code point table.
uint32_t byte_to_unicode(uint8_t b);
int byte_from_unicode(uint32_t cp);  // -1 when cp is not in the table

class BpeTokenizer final : public VocabTokenizer<BpeVocab, &BpeVocab::tokens> {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> create(BpeVocab vocab, const std::string& source);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special = false) const override;
  std::string token_bytes(int32_t id) const override;
  std::string kind() const override { return "gpt2 (byte-level BPE)"; }

  // Pre-tokenized pieces of plain text (tests check splits against the published patterns).
  std::vector<std::string> pre_tokenize_text(std::string_view text) const;

 private:
  explicit BpeTokenizer(BpeVocab v) : VocabTokenizer(std::move(v)) {}
  Status build(const std::string& source);
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> ids_;
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, result
  int32_t byte_ids_[256];                       // id of each single mapped byte, or -1
  SpecialTokenMatcher user_defined_;
  SpecialTokenMatcher special_;  // user-defined + control, for parse_special
};

}  // namespace hearth
