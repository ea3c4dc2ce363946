// An Engine is a loaded model plus everything needed to talk to it in text: its tokenizer, its
// chat template and its special-token strings. Immutable after load; shared by sessions.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

struct TokenVocabulary;

class Engine {
 public:
  static Result<std::shared_ptr<Engine>> load(const std::string& path, const LoadOptions& options);

  const Model& model() const { return *model_; }
  std::shared_ptr<const Model> model_ptr() const { return model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& path() const { return path_; }
  double load_ms() const { return load_ms_; }
  // Where load_ms went: the model's phases (model.h) and the tokenizer's.
  const LoadPhases& load_phases() const { return phases_; }
  // The model's own Jinja chat template ("" when it carries none).
  const std::string& chat_template() const { return chat_template_; }
  std::string bos_text() const;
  std::string eos_text() const;
  // Short human name: general.name, or the file/directory name.
  const std::string& name() const { return name_; }
  // The vocabulary as constrained decoding needs it (each token's bytes in a trie), built on
  // first use and shared by every session; thread-safe.
  std::shared_ptr<const TokenVocabulary> token_vocabulary() const;
  // The pool every Session of this engine draws its KV cache from (kv/kv-pool.h): unbounded,
  // so a session's only limit is its context size, and its memory grows with its history
  // instead of being taken for the whole context up front. Thread-safe (the pool is).
  const std::shared_ptr<KvPool>& kv_pool() const { return kv_pool_; }

 private:
  std::shared_ptr<Model> model_;
  std::shared_ptr<KvPool> kv_pool_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string path_, chat_template_, name_;
  double load_ms_ = 0;
  LoadPhases phases_;
  mutable std::once_flag vocabulary_once_;
  mutable std::shared_ptr<const TokenVocabulary> vocabulary_;
};

}  // namespace hearth
