// Tokenizer::from_gguf: reads `tokenizer.ggml.*` metadata into an SpmVocab ("llama"), a
// BpeVocab ("gpt2") or a WordPieceVocab ("bert"). A new tokenizer model type gets its own branch
// here.
#include <string>

#include "base/printable.h"
#include "formats/gguf.h"
#include "tokenizer/bpe-tokenizer.h"
#include "tokenizer/pre-tokenizer.h"
#include "tokenizer/spm-tokenizer.h"
#include "tokenizer/wordpiece-tokenizer.h"

namespace hearth {
namespace {

struct Common {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  int32_t unk = -1, bos = -1, eos = -1, pad = -1;
  std::vector<int32_t> eog;
  std::optional<bool> add_bos, add_eos;
};

Status read_id(const GgufFile& g, const char* key, int64_t n, int32_t* out) {
  auto v = g.get_int(key);
  if (!v.is_ok()) return v.status();
  if (!v.value()) return Status::ok();
  const int64_t id = *v.value();
  if (id < -1 || id >= n) {
    return Status::error(std::string(key) + " " + std::to_string(id) +
                         " outside the vocabulary of " + std::to_string(n));
  }
  *out = static_cast<int32_t>(id);
  return Status::ok();
}

// Texts that mean "end of turn" in common chat formats; llama.cpp treats them the same way.
bool is_eog_text(const std::string& t) {
  static const char* names[] = {"<|eot_id|>",    "<|im_end|>",      "<|end|>",    "<|endoftext|>",
                                "<end_of_turn>", "<|end_of_text|>", "<|eom_id|>", "<|return|>"};
  for (const char* n : names) {
    if (t == n) return true;
  }
  return false;
}

Result<Common> read_common(const GgufFile& g) {
  Common c;
  HEARTH_ASSIGN_OR_RETURN(auto tokens, g.get_string_array("tokenizer.ggml.tokens"));
  if (!tokens) return Status::error("tokenizer.ggml.tokens: missing");
  c.tokens = std::move(*tokens);
  const auto n = static_cast<int64_t>(c.tokens.size());
  if (n == 0 || n > 0x7FFFFFFF) return Status::error("tokenizer.ggml.tokens: bad token count");
  HEARTH_ASSIGN_OR_RETURN(auto types, g.get_int_array("tokenizer.ggml.token_type"));
  if (types) {
    if (static_cast<int64_t>(types->size()) != n) {
      return Status::error("tokenizer.ggml.token_type: " + std::to_string(types->size()) +
                           " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const int64_t t = (*types)[i];
      if (t < 0 || t > 6) {
        return Status::error("tokenizer.ggml.token_type[" + std::to_string(i) + "]: unknown type " +
                             std::to_string(t));
      }
      c.types.push_back(static_cast<TokenType>(t));
    }
  } else {
    c.types.assign(n, TokenType::kNormal);
  }
  HEARTH_TRY(read_id(g, "tokenizer.ggml.unknown_token_id", n, &c.unk));
  HEARTH_TRY(read_id(g, "tokenizer.ggml.bos_token_id", n, &c.bos));
  HEARTH_TRY(read_id(g, "tokenizer.ggml.eos_token_id", n, &c.eos));
  HEARTH_TRY(read_id(g, "tokenizer.ggml.padding_token_id", n, &c.pad));
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    int32_t id = -1;
    HEARTH_TRY(read_id(g, key, n, &id));
    if (id >= 0) c.eog.push_back(id);
  }
  for (int64_t i = 0; i < n; ++i) {
    if ((c.types[i] == TokenType::kControl || c.types[i] == TokenType::kUserDefined) &&
        is_eog_text(c.tokens[i])) {
      c.eog.push_back(static_cast<int32_t>(i));
    }
  }
  HEARTH_ASSIGN_OR_RETURN(c.add_bos, g.get_bool("tokenizer.ggml.add_bos_token"));
  HEARTH_ASSIGN_OR_RETURN(c.add_eos, g.get_bool("tokenizer.ggml.add_eos_token"));
  return c;
}

Result<std::unique_ptr<Tokenizer>> spm_from_gguf(const GgufFile& g, Common c) {
  SpmVocab v;
  const size_t n = c.tokens.size();
  HEARTH_ASSIGN_OR_RETURN(auto scores, g.get_float_array("tokenizer.ggml.scores"));
  if (scores) {
    if (scores->size() != n) {
      return Status::error("tokenizer.ggml.scores: " + std::to_string(scores->size()) +
                           " entries for " + std::to_string(n) + " tokens");
    }
    v.scores.assign(scores->begin(), scores->end());
  } else {
    v.scores.assign(n, 0.0f);
  }
  v.pieces = std::move(c.tokens);
  v.types = std::move(c.types);
  // llama.cpp's defaults for a SentencePiece vocabulary when the ids are not stored.
  v.unk_id = c.unk >= 0 ? c.unk : (n > 0 ? 0 : -1);
  v.bos_id = c.bos >= 0 ? c.bos : (n > 1 ? 1 : -1);
  v.eos_id = c.eos >= 0 ? c.eos : (n > 2 ? 2 : -1);
  v.pad_id = c.pad;
  v.extra_eog_ids = std::move(c.eog);
  v.add_bos = c.add_bos.value_or(true);
  v.add_eos = c.add_eos.value_or(false);
  HEARTH_ASSIGN_OR_RETURN(auto prefix, g.get_bool("tokenizer.ggml.add_space_prefix"));
  v.add_dummy_prefix = prefix.value_or(true);
  HEARTH_ASSIGN_OR_RETURN(auto extra_ws, g.get_bool("tokenizer.ggml.remove_extra_whitespaces"));
  v.remove_extra_whitespaces = extra_ws.value_or(false);
  v.byte_fallback = false;
  for (TokenType t : v.types) v.byte_fallback |= t == TokenType::kByte;
  HEARTH_ASSIGN_OR_RETURN(auto tok, SpmTokenizer::create(std::move(v), "tokenizer.ggml"));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

Result<std::unique_ptr<Tokenizer>> bpe_from_gguf(const GgufFile& g, Common c) {
  BpeVocab v;
  HEARTH_ASSIGN_OR_RETURN(auto merges, g.get_string_array("tokenizer.ggml.merges"));
  if (!merges) return Status::error("tokenizer.ggml.merges: missing for a gpt2 tokenizer");
  v.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos) {
      return Status::error("tokenizer.ggml.merges[" + std::to_string(i) + "]: \"" +
                           printable(m, 80) + "\" is not two tokens separated by a space");
    }
    v.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  HEARTH_ASSIGN_OR_RETURN(auto pre_name, g.get_string("tokenizer.ggml.pre"));
  const std::string pre = pre_name.value_or("gpt-2");
  auto p = pre_tokenizer_for_gguf(pre);
  if (!p)
    return Status::error("tokenizer.ggml.pre: unsupported pre-tokenizer '" + printable(pre, 80) +
                         "'");
  v.pre = std::move(*p);
  v.ignore_merges = v.pre.ignore_merges;  // e.g. Llama 3's tokenizer.json sets ignore_merges
  v.tokens = std::move(c.tokens);
  v.types = std::move(c.types);
  v.unk_id = c.unk;
  v.bos_id = c.bos;
  v.eos_id = c.eos;
  v.pad_id = c.pad;
  v.extra_eog_ids = std::move(c.eog);
  v.add_bos = c.add_bos.value_or(v.pre.add_bos);
  v.add_eos = c.add_eos.value_or(false);
  HEARTH_ASSIGN_OR_RETURN(auto tok, BpeTokenizer::create(std::move(v), "tokenizer.ggml"));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

// BERT vocabularies as llama.cpp's converter writes them: "▁" marks word starts ("phantom
// space"), [CLS] / [SEP] are the ids added around a sequence, text is lowercased (llama.cpp's
// WPM tokenizer lowercases every BERT vocabulary; no GGUF key says otherwise).
Result<std::unique_ptr<Tokenizer>> wordpiece_from_gguf(const GgufFile& g, Common c) {
  WordPieceVocab v;
  const auto n = static_cast<int64_t>(c.tokens.size());
  int32_t cls = -1, sep = -1;
  HEARTH_TRY(read_id(g, "tokenizer.ggml.cls_token_id", n, &cls));
  HEARTH_TRY(read_id(g, "tokenizer.ggml.seperator_token_id", n, &sep));  // llama.cpp's spelling
  v.tokens = std::move(c.tokens);
  v.types = std::move(c.types);
  v.phantom_space = true;
  v.unk_id = c.unk;
  v.bos_id = cls >= 0 ? cls : c.bos;
  v.eos_id = sep >= 0 ? sep : c.eos;
  v.pad_id = c.pad;
  v.extra_eog_ids = std::move(c.eog);
  v.add_bos = c.add_bos.value_or(true);
  v.add_eos = c.add_eos.value_or(true);
  HEARTH_ASSIGN_OR_RETURN(auto tok, WordPieceTokenizer::create(std::move(v), "tokenizer.ggml"));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& gguf) {
  auto run = [&]() -> Result<std::unique_ptr<Tokenizer>> {
    HEARTH_ASSIGN_OR_RETURN(auto model, gguf.get_string("tokenizer.ggml.model"));
    if (!model) return Status::error("tokenizer.ggml.model: missing");
    HEARTH_ASSIGN_OR_RETURN(Common c, read_common(gguf));
    if (*model == "llama") return spm_from_gguf(gguf, std::move(c));
    if (*model == "gpt2") return bpe_from_gguf(gguf, std::move(c));
    if (*model == "bert") return wordpiece_from_gguf(gguf, std::move(c));
    return Status::error("tokenizer.ggml.model: unsupported tokenizer model '" +
                         printable(*model, 80) + "'");
  };
  auto r = run();
  if (!r.is_ok()) return r.status().with_context(gguf.path());
  return r;
}

}  // namespace hearth
