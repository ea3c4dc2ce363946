// Engine::load: model, tokenizer (GGUF metadata or HF files) and chat template, with timing.
#include "runtime/engine.h"

#include <future>

#include "base/mapped-file.h"
#include "base/timer.h"
#include "formats/gguf.h"
#include "formats/hf-config.h"
#include "grammar/token-trie.h"

namespace hearth {

namespace {
std::string base_name(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}
}  // namespace

Result<std::shared_ptr<Engine>> Engine::load(const std::string& path, const LoadOptions& options) {
  Timer timer;
  auto engine = std::make_shared<Engine>();
  engine->path_ = path;
  // A GGUF's tokenizer needs only the metadata: built from a mapping of its own on a thread
  // while the model loads, it is ready when the weights are (10-14 ms of a 7B's start-up after
  // them otherwise). A file that is no GGUF fails in load_model first, with its own message.
  std::future<Result<std::unique_ptr<Tokenizer>>> early_tokenizer;
  if (!is_directory(path) && file_exists(path))
    early_tokenizer =
        std::async(std::launch::async, [path]() -> Result<std::unique_ptr<Tokenizer>> {
          HEARTH_ASSIGN_OR_RETURN(GgufFile g, GgufFile::open(path));
          return Tokenizer::from_gguf(g);
        });
  HEARTH_ASSIGN_OR_RETURN(engine->model_, load_model(path, options));
  engine->kv_pool_ = engine->model_->kv_pool(KvPool::kUnbounded);
  const Model& m = *engine->model_;
  engine->name_ = base_name(path);
  engine->phases_ = m.load_phases();
  Timer tokenizer;
  if (const GgufFile* g = m.gguf()) {
    auto tok = early_tokenizer.valid() ? early_tokenizer.get() : Tokenizer::from_gguf(*g);
    if (!tok.is_ok()) return tok.status().with_context(path);
    engine->tokenizer_ = std::move(tok).value();
    auto tmpl = g->get_string("tokenizer.chat_template");
    if (tmpl.is_ok() && tmpl.value()) engine->chat_template_ = *tmpl.value();
    auto name = g->get_string("general.name");
    if (name.is_ok() && name.value() && !name.value()->empty()) engine->name_ = *name.value();
  } else {
    auto tok = Tokenizer::from_hf_dir(path);
    if (!tok.is_ok()) return tok.status().with_context(path);
    engine->tokenizer_ = std::move(tok).value();
    const std::string tc_path = path + "/tokenizer_config.json";
    if (file_exists(tc_path)) {
      HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(tc_path));
      HEARTH_ASSIGN_OR_RETURN(HfTokenizerConfig tc, parse_hf_tokenizer_config(text, tc_path));
      engine->chat_template_ = tc.chat_template;
    }
  }
  engine->phases_.tokenizer_ms = tokenizer.elapsed_ms();
  if (engine->tokenizer_->n_vocab() > m.hparams().n_vocab)
    return Status::error(path + ": tokenizer has " + std::to_string(engine->tokenizer_->n_vocab()) +
                         " tokens but the embedding has only " +
                         std::to_string(m.hparams().n_vocab) + " rows");
  engine->load_ms_ = timer.elapsed_ms();
  return engine;
}

std::string Engine::bos_text() const {
  const int32_t id = tokenizer_->bos_id();
  return id >= 0 ? tokenizer_->token_text(id) : "";
}

std::string Engine::eos_text() const {
  const int32_t id = tokenizer_->eos_id();
  return id >= 0 ? tokenizer_->token_text(id) : "";
}

std::shared_ptr<const TokenVocabulary> Engine::token_vocabulary() const {
  std::call_once(vocabulary_once_,
                 [&] { vocabulary_ = TokenVocabulary::from_tokenizer(*tokenizer_); });
  return vocabulary_;
}

}  // namespace hearth
