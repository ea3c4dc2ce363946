// tokenizer.ggml.* from HF tokenizer files. The vocabulary is padded to config.json's vocab_size
// with "[PAD<n>]" entries, as llama.cpp's converter does, so token_embd rows all have a token.
#include "runtime/convert/convert-vocab.h"

#include <filesystem>

#include "base/mapped-file.h"
#include "tokenizer/hf-tokenizer-json.h"
#include "tokenizer/pre-tokenizer.h"
#include "tokenizer/sentencepiece-model.h"

namespace hearth::convert {

namespace {

namespace fs = std::filesystem;

struct Vocab {
  std::string model;  // "llama" or "gpt2"
  std::vector<std::string> tokens;
  std::vector<float> scores;  // llama only
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // gpt2 only
  std::string pre;
  int32_t unk = -1, bos = -1, eos = -1, pad = -1;
};

int32_t find_token(const Vocab& v, const std::string& text) {
  if (text.empty()) return -1;
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == text) return int32_t(i);
  return -1;
}

void pad_to(Vocab& v, int64_t vocab_size) {
  for (int64_t i = int64_t(v.tokens.size()), n = 1; i < vocab_size; ++i, ++n) {
    v.tokens.push_back("[PAD" + std::to_string(n) + "]");
    if (v.model == "llama") v.scores.push_back(-1000.0f);
    v.types.push_back(int32_t(TokenType::kUnused));
  }
}

Result<Vocab> read_sentencepiece(const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  HEARTH_ASSIGN_OR_RETURN(SpmVocab spm, parse_sentencepiece_model(file.data(), file.size(), path));
  Vocab v;
  v.model = "llama";
  v.pre = "default";
  v.tokens = std::move(spm.pieces);
  v.scores = std::move(spm.scores);
  for (TokenType t : spm.types) v.types.push_back(int32_t(t));
  v.unk = spm.unk_id;
  v.bos = spm.bos_id;
  v.eos = spm.eos_id;
  v.pad = spm.pad_id;
  return v;
}

// The GGUF pre-tokenizer name whose pattern pipeline equals the one tokenizer.json describes,
// preferring one whose ignore_merges default agrees with the file's (llama-bpe vs dbrx).
Result<std::string> gguf_pre_name(const BpeVocab& bpe, const std::string& source) {
  for (bool same_flags : {true, false}) {
    for (std::string_view name : known_pre_tokenizer_names()) {
      auto p = pre_tokenizer_for_gguf(name);
      if (p && *p == bpe.pre && (!same_flags || p->ignore_merges == bpe.ignore_merges)) {
        return std::string(name);
      }
    }
  }
  return Status::error(source + ": pre_tokenizer: no GGUF pre-tokenizer name matches it");
}

Result<Vocab> read_tokenizer_json(const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  HEARTH_ASSIGN_OR_RETURN(BpeVocab bpe, parse_hf_tokenizer_json(text, path));
  Vocab v;
  v.model = "gpt2";
  HEARTH_ASSIGN_OR_RETURN(v.pre, gguf_pre_name(bpe, path));
  v.tokens = std::move(bpe.tokens);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const TokenType t = i < bpe.types.size() ? bpe.types[i] : TokenType::kUnused;
    // Ids tokenizer.json leaves unassigned get a placeholder name, as llama.cpp writes them.
    if (t == TokenType::kUnused && v.tokens[i].empty())
      v.tokens[i] = "[PAD" + std::to_string(i) + "]";
    v.types.push_back(int32_t(t));
  }
  for (const auto& [a, b] : bpe.merges) v.merges.push_back(a + " " + b);
  v.unk = bpe.unk_id;
  v.bos = bpe.bos_id;
  v.eos = bpe.eos_id;
  v.pad = bpe.pad_id;
  return v;
}

}  // namespace

Status add_tokenizer_metadata(const std::string& dir, const HfConfig& cfg,
                              const std::optional<HfTokenizerConfig>& tc, GgufWriter& w) {
  const std::string spm_path = dir + "/tokenizer.model", json_path = dir + "/tokenizer.json";
  Vocab v;
  if (fs::exists(spm_path)) {
    HEARTH_ASSIGN_OR_RETURN(v, read_sentencepiece(spm_path));
  } else if (fs::exists(json_path)) {
    HEARTH_ASSIGN_OR_RETURN(v, read_tokenizer_json(json_path));
  } else {
    return Status::error(dir + ": no tokenizer.model or tokenizer.json");
  }
  if (cfg.vocab_size > 0 && int64_t(v.tokens.size()) > cfg.vocab_size)
    return Status::error(dir + ": tokenizer has " + std::to_string(v.tokens.size()) +
                         " tokens but config.json vocab_size is " + std::to_string(cfg.vocab_size));
  pad_to(v, cfg.vocab_size);

  // Special ids: config.json first (what the model was trained with), then the token strings
  // tokenizer_config.json names, then what the tokenizer file itself declares.
  auto pick = [&](const std::vector<int64_t>& cfg_ids, const std::string& text, int32_t own) {
    if (!cfg_ids.empty() && cfg_ids.front() >= 0 && cfg_ids.front() < int64_t(v.tokens.size()))
      return int32_t(cfg_ids.front());
    if (int32_t id = find_token(v, text); id >= 0) return id;
    return own;
  };
  const std::string no_text;
  v.bos = pick(cfg.bos_token_ids, tc ? tc->bos_token : no_text, v.bos);
  v.eos = pick(cfg.eos_token_ids, tc ? tc->eos_token : no_text, v.eos);
  v.unk = pick({}, tc ? tc->unk_token : no_text, v.unk);
  v.pad = pick({}, tc ? tc->pad_token : no_text, v.pad);

  w.set_string("tokenizer.ggml.model", v.model);
  w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  if (v.model == "llama") w.set_f32_array("tokenizer.ggml.scores", v.scores);
  w.set_i32_array("tokenizer.ggml.token_type", v.types);
  if (v.model == "gpt2") w.set_string_array("tokenizer.ggml.merges", v.merges);
  auto put_id = [&](const char* key, int32_t id) {
    if (id >= 0 && id < int32_t(v.tokens.size())) w.set_u32(key, uint32_t(id));
  };
  put_id("tokenizer.ggml.bos_token_id", v.bos);
  put_id("tokenizer.ggml.eos_token_id", v.eos);
  put_id("tokenizer.ggml.unknown_token_id", v.unk);
  put_id("tokenizer.ggml.padding_token_id", v.pad);
  if (tc && tc->add_bos_token) w.set_bool("tokenizer.ggml.add_bos_token", *tc->add_bos_token);
  if (tc && tc->add_eos_token) w.set_bool("tokenizer.ggml.add_eos_token", *tc->add_eos_token);

  std::string tmpl = tc ? tc->chat_template : std::string();
  // Newer HF repos keep the template in its own file instead of tokenizer_config.json.
  if (tmpl.empty() && fs::exists(dir + "/chat_template.jinja")) {
    HEARTH_ASSIGN_OR_RETURN(tmpl, read_text_file(dir + "/chat_template.jinja"));
  }
  if (!tmpl.empty()) w.set_string("tokenizer.chat_template", tmpl);
  return Status::ok();
}

}  // namespace hearth::convert
