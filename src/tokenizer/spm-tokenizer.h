// SentencePiece-BPE (Llama 2 family): the vocabulary as data (SpmVocab, filled from GGUF metadata
// or a tokenizer.model) and the tokenizer over it. New normalizer options belong in SpmVocab.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/special-tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab-tokenizer.h"

namespace hearth {

struct SpmVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<TokenType> types;
  int32_t unk_id = -1, bos_id = -1, eos_id = -1, pad_id = -1;
  std::vector<int32_t> extra_eog_ids;  // EOT/EOM and similar ids that also end generation
  bool add_bos = true, add_eos = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = false;
  bool escape_whitespaces = true;
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = true;
  std::string unk_surface = " \xE2\x81\x87 ";  // " ⁇ ", SentencePiece's default
};

// Checks sizes, id ranges and byte pieces; `source` names the file in errors.
Status validate_spm_vocab(const SpmVocab& v, const std::string& source);

class SpmTokenizer final : public VocabTokenizer<SpmVocab, &SpmVocab::pieces> {
 public:
  static Result<std::unique_ptr<SpmTokenizer>> create(SpmVocab vocab, const std::string& source);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special = false) const override;
  std::string token_bytes(int32_t id) const override;
  std::string kind() const override { return "llama (SentencePiece BPE)"; }

  const SpmVocab& vocab() const { return v_; }

 private:
  explicit SpmTokenizer(SpmVocab v);
  // Normalizes one run of plain text (no special tokens) and appends its ids.
  void encode_fragment(std::string_view text, bool dummy_prefix, std::vector<int32_t>& out) const;
  void encode_normalized(const std::string& normalized, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> mergeable_;  // normal, user-defined, unused pieces
  std::unordered_map<std::string, int32_t> all_pieces_;
  int32_t byte_ids_[256];
  SpecialTokenMatcher user_defined_;  // matched inside the text, as SentencePiece does
  SpecialTokenMatcher control_;       // control + user-defined, for parse_special
};

}  // namespace hearth
