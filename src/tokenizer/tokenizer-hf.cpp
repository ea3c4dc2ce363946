// Tokenizer::from_hf_dir: tokenizer.model (SentencePiece) or tokenizer.json (byte-level BPE or
// WordPiece), with BOS/EOS rules from tokenizer_config.json and ids from config.json.
#include "base/mapped-file.h"
#include "formats/hf-config.h"
#include "tokenizer/bpe-tokenizer.h"
#include "tokenizer/hf-tokenizer-json.h"
#include "tokenizer/sentencepiece-model.h"
#include "tokenizer/spm-tokenizer.h"
#include "tokenizer/wordpiece-tokenizer.h"

namespace hearth {
namespace {

struct Rules {
  std::optional<HfTokenizerConfig> tc;
  std::optional<HfConfig> config;
};

Result<Rules> read_rules(const std::string& dir) {
  Rules r;
  const std::string tc_path = dir + "/tokenizer_config.json";
  if (file_exists(tc_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(tc_path));
    HEARTH_ASSIGN_OR_RETURN(r.tc, parse_hf_tokenizer_config(text, tc_path));
  }
  const std::string cfg_path = dir + "/config.json";
  if (file_exists(cfg_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(cfg_path));
    HEARTH_ASSIGN_OR_RETURN(r.config, parse_hf_config(text, cfg_path));
  }
  return r;
}

// Applies tokenizer_config.json / config.json to ids and flags. `lookup` maps a token text to
// its id (-1 when absent).
template <class Vocab, class Lookup>
void apply_rules(const Rules& r, Vocab& v, Lookup lookup) {
  const int64_t n = static_cast<int64_t>(lookup.size);
  if (r.config) {
    if (!r.config->bos_token_ids.empty()) {
      const int64_t b = r.config->bos_token_ids.front();
      if (b >= 0 && b < n) v.bos_id = static_cast<int32_t>(b);
    }
    for (size_t i = 0; i < r.config->eos_token_ids.size(); ++i) {
      const int64_t e = r.config->eos_token_ids[i];
      if (e < 0 || e >= n) continue;
      if (i == 0)
        v.eos_id = static_cast<int32_t>(e);
      else
        v.extra_eog_ids.push_back(static_cast<int32_t>(e));
    }
  }
  if (r.tc) {
    if (int32_t b = lookup(r.tc->bos_token); b >= 0) v.bos_id = b;
    if (int32_t e = lookup(r.tc->eos_token); e >= 0) {
      if (v.eos_id >= 0 && v.eos_id != e) v.extra_eog_ids.push_back(v.eos_id);
      v.eos_id = e;
    }
    if (int32_t u = lookup(r.tc->unk_token); u >= 0) v.unk_id = u;
    if (int32_t p = lookup(r.tc->pad_token); p >= 0) v.pad_id = p;
    if (r.tc->add_bos_token) v.add_bos = *r.tc->add_bos_token;
    if (r.tc->add_eos_token) v.add_eos = *r.tc->add_eos_token;
  }
}

struct TextLookup {
  const std::vector<std::string>& texts;
  size_t size;
  int32_t operator()(const std::string& s) const {
    if (s.empty()) return -1;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (texts[i] == s) return static_cast<int32_t>(i);
    }
    return -1;
  }
};

Result<std::unique_ptr<Tokenizer>> from_json(const Rules& rules, const std::string& json_path) {
  HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(json_path, 256u << 20));
  HEARTH_ASSIGN_OR_RETURN(HfTokenizerModel model, parse_hf_tokenizer_json_model(text, json_path));
  if (model.wordpiece) {
    WordPieceVocab& v = *model.wordpiece;
    apply_rules(rules, v, TextLookup{v.tokens, v.tokens.size()});
    HEARTH_ASSIGN_OR_RETURN(auto tok, WordPieceTokenizer::create(std::move(v), json_path));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }
  BpeVocab& v = *model.bpe;
  apply_rules(rules, v, TextLookup{v.tokens, v.tokens.size()});
  HEARTH_ASSIGN_OR_RETURN(auto tok, BpeTokenizer::create(std::move(v), json_path));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_dir(const std::string& dir) {
  HEARTH_ASSIGN_OR_RETURN(Rules rules, read_rules(dir));
  const std::string model_path = dir + "/tokenizer.model";
  const std::string json_path = dir + "/tokenizer.json";
  if (file_exists(model_path)) {
    HEARTH_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open(model_path));
    HEARTH_ASSIGN_OR_RETURN(SpmVocab v, parse_sentencepiece_model(f.data(), f.size(), model_path));
    apply_rules(rules, v, TextLookup{v.pieces, v.pieces.size()});
    HEARTH_ASSIGN_OR_RETURN(auto tok, SpmTokenizer::create(std::move(v), model_path));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }
  if (file_exists(json_path)) return from_json(rules, json_path);
  return Status::error(dir + ": no tokenizer.model or tokenizer.json");
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(const std::string& json_path) {
  const size_t slash = json_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : json_path.substr(0, slash);
  HEARTH_ASSIGN_OR_RETURN(Rules rules, read_rules(dir));
  return from_json(rules, json_path);
}

}  // namespace hearth
