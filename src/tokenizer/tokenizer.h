// Text <-> token ids. One interface over the tokenizer algorithms (SentencePiece-BPE now,
// byte-level BPE later); built from GGUF metadata or from a Hugging Face directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace hearth {

class GgufFile;

enum class TokenType : int32_t {  // GGUF tokenizer.ggml.token_type values
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // From `tokenizer.ggml.*` metadata (model, tokens, scores, token_type, merges, special ids,
  // add_bos/add_eos).
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& gguf);
  // From a Hugging Face directory: tokenizer.model (SentencePiece protobuf) or tokenizer.json,
  // plus tokenizer_config.json / config.json for BOS/EOS rules.
  static Result<std::unique_ptr<Tokenizer>> from_hf_dir(const std::string& dir);
  // From one tokenizer.json (with its directory's tokenizer_config.json / config.json rules),
  // even where a tokenizer.model sits beside it.
  static Result<std::unique_ptr<Tokenizer>> from_hf_json(const std::string& json_path);

  // Tokenizes text. add_special: prepend BOS / append EOS as the model's rules say.
  // parse_special: recognise control-token texts such as "<s>" inside `text`.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special = false) const = 0;

  // The bytes token `id` contributes to output (byte-fallback tokens give their raw byte, the
  // SentencePiece "▁" becomes a space; control tokens give ""). Out-of-range ids give "".
  virtual std::string token_bytes(int32_t id) const = 0;
  // The vocabulary entry as stored ("▁the", "<0x0A>", "<s>").
  virtual std::string token_text(int32_t id) const = 0;
  virtual TokenType token_type(int32_t id) const = 0;

  // Decodes a whole sequence (no leading-space stripping; the caller decides that).
  std::string decode(const std::vector<int32_t>& ids) const;

  virtual int32_t n_vocab() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;  // -1 when none
  virtual bool add_bos() const = 0;
  virtual bool add_eos() const = 0;
  // End of generation: EOS, EOT and any other ids the model marks as stopping generation.
  virtual bool is_end_of_generation(int32_t id) const = 0;
  virtual std::string kind() const = 0;  // "llama (SentencePiece BPE)", "gpt2 (byte-level BPE)"
};

// Streams decoded text: push() returns only complete UTF-8 (a multi-byte character split across
// byte-fallback tokens is held back until whole); invalid sequences become U+FFFD.
// strip_leading_space mimics SentencePiece decoding of a sequence's first token.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool strip_leading_space = false)
      : tok_(tok), strip_(strip_leading_space) {}
  std::string push(int32_t id);
  std::string flush();  // whatever is pending, with incomplete bytes replaced by U+FFFD

 private:
  const Tokenizer& tok_;
  bool strip_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace hearth
