// What every table-driven tokenizer shares: id range checks, token texts and types, BOS/EOS
// rules and end-of-generation ids, all read from the algorithm's vocabulary struct. A new
// algorithm derives from VocabTokenizer<ItsVocab, &ItsVocab::texts> and adds only its encoding.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth {

// The checks every vocabulary passes: 1 to 2^31-1 entries, one known type per entry, special ids
// inside the table or -1. `source` names the file in errors.
template <class Vocab, std::vector<std::string> Vocab::*Texts>
Status check_vocab_table(const Vocab& v, const std::string& source) {
  const size_t n = (v.*Texts).size();
  if (n == 0) return Status::error(source + ": tokenizer has no tokens");
  if (n > 0x7FFFFFFF) return Status::error(source + ": token count exceeds int32");
  if (v.types.size() != n) {
    return Status::error(source + ": token_type has " + std::to_string(v.types.size()) +
                         " entries, tokens has " + std::to_string(n));
  }
  auto check_id = [&](int32_t id, const char* field) -> Status {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return Status::error(source + ": " + field + " " + std::to_string(id) +
                           " outside the vocabulary of " + std::to_string(n));
    }
    return Status::ok();
  };
  HEARTH_TRY(check_id(v.unk_id, "unknown token id"));
  HEARTH_TRY(check_id(v.bos_id, "bos token id"));
  HEARTH_TRY(check_id(v.eos_id, "eos token id"));
  HEARTH_TRY(check_id(v.pad_id, "padding token id"));
  if constexpr (requires { v.model_unk_id; })  // (BPE: what a byte with no token becomes)
    HEARTH_TRY(check_id(v.model_unk_id, "model unk_token id"));
  for (int32_t id : v.extra_eog_ids) HEARTH_TRY(check_id(id, "end-of-generation token id"));
  for (size_t i = 0; i < n; ++i) {
    const auto t = static_cast<int32_t>(v.types[i]);
    if (t < 0 || t > 6) {
      return Status::error(source + ": token_type[" + std::to_string(i) +
                           "] = " + std::to_string(t) + " is not a known token type");
    }
  }
  return Status::ok();
}

// `Vocab` needs: types, unk_id, pad_id, bos_id, eos_id, extra_eog_ids, add_bos, add_eos; `Texts`
// names its vector of stored token texts (one per id, in the same order as types).
template <class Vocab, std::vector<std::string> Vocab::*Texts>
class VocabTokenizer : public Tokenizer {
 public:
  std::string token_text(int32_t id) const override {
    return in_range(id) ? (v_.*Texts)[id] : std::string();
  }
  TokenType token_type(int32_t id) const override {
    return in_range(id) ? v_.types[id] : TokenType::kUndefined;
  }
  int32_t n_vocab() const override { return static_cast<int32_t>((v_.*Texts).size()); }
  int32_t bos_id() const override { return v_.bos_id; }
  int32_t eos_id() const override { return v_.eos_id; }
  bool add_bos() const override { return v_.add_bos; }
  bool add_eos() const override { return v_.add_eos; }
  bool is_end_of_generation(int32_t id) const override {
    if (id < 0) return false;
    if (id == v_.eos_id) return true;
    for (int32_t e : v_.extra_eog_ids)
      if (e == id) return true;
    return false;
  }

 protected:
  explicit VocabTokenizer(Vocab v) : v_(std::move(v)) {}
  bool in_range(int32_t id) const { return id >= 0 && id < n_vocab(); }
  // BOS when add_special and the model adds one, then body(out), then EOS likewise.
  template <class Body>
  std::vector<int32_t> with_bos_eos(bool add_special, Body body) const {
    std::vector<int32_t> out;
    if (add_special && v_.add_bos && v_.bos_id >= 0) out.push_back(v_.bos_id);
    body(out);
    if (add_special && v_.add_eos && v_.eos_id >= 0) out.push_back(v_.eos_id);
    return out;
  }

  Vocab v_;
};

}  // namespace hearth
