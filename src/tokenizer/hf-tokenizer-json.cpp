// tokenizer.json reader: BPE (vocab, merges as "a b" strings or ["a", "b"] pairs) or WordPiece
// (BERT normalizer and pre-tokenizer), added_tokens,
// normalizer (none/NFC), pre_tokenizer (ByteLevel, Split, Digits, Punctuation, Sequence), ByteLevel
// decoder, and BOS/EOS from a TemplateProcessing post-processor.
#include "tokenizer/hf-tokenizer-json.h"

#include <nlohmann/json.hpp>

#include <cctype>

#include "base/printable.h"

namespace hearth {
namespace {

using json = nlohmann::json;

Status bad(const std::string& source, const std::string& what) {
  return Status::error(source + ": " + what);
}

Status add_split(std::string_view pattern, BpeVocab& v, const std::string& source) {
  auto re = SplitRegex::compile(pattern);
  if (!re.is_ok()) return bad(source, "pre_tokenizer: " + re.message());
  v.pre.splits.push_back(std::move(re).value());
  return Status::ok();
}

// A Split's literal String pattern as a regex (every character escaped).
std::string escape_literal(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch < 0x80 && !std::isalnum(ch)) out.push_back('\\');
    out.push_back(static_cast<char>(ch));
  }
  return out;
}

// Sequences nest (a Sequence of Sequences ...): bounded, as the file is the model's.
constexpr int kMaxSequenceDepth = 16;

Status read_pre(const json& p, BpeVocab& v, const std::string& source, int depth = 0) {
  if (p.is_null()) return Status::ok();
  if (depth > kMaxSequenceDepth) return bad(source, "pre_tokenizer: Sequences nested too deep");
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
    return bad(source, "pre_tokenizer: not an object with a type");
  }
  const std::string type = p["type"];
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) {
      return bad(source, "pre_tokenizer.pretokenizers: missing");
    }
    for (const json& s : p["pretokenizers"]) HEARTH_TRY(read_pre(s, v, source, depth + 1));
    return Status::ok();
  }
  if (type == "ByteLevel") {
    if (p.contains("add_prefix_space") && p["add_prefix_space"].is_boolean()) {
      v.add_prefix_space = p["add_prefix_space"];
    }
    const bool use_regex =
        !p.contains("use_regex") || !p["use_regex"].is_boolean() || p["use_regex"].get<bool>();
    return use_regex ? add_split(gpt2_split_pattern(), v, source) : Status::ok();
  }
  if (type == "Digits") {
    const bool individual = p.contains("individual_digits") &&
                            p["individual_digits"].is_boolean() &&
                            p["individual_digits"].get<bool>();
    return add_split(individual ? R"(\p{N})" : R"(\p{N}+)", v, source);
  }
  const std::string behavior = p.value("behavior", std::string("Isolated"));
  if (type == "Punctuation") {  // ASCII punctuation and Unicode P, as tokenizers' is_punctuation
    if (behavior != "Isolated" && behavior != "Contiguous") {
      return bad(source, "pre_tokenizer: Punctuation behavior '" + printable(behavior, 80) +
                             "' is unsupported");
    }
    return add_split(
        behavior == "Isolated" ? R"([\p{P}!-/:-@\[-`{-~])" : R"([\p{P}!-/:-@\[-`{-~]+)", v, source);
  }
  if (type == "Split") {
    const json* pat = p.contains("pattern") ? &p["pattern"] : nullptr;
    std::string regex;
    if (pat && pat->is_object() && pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      regex = (*pat)["Regex"].get<std::string>();
    } else if (pat && pat->is_object() && pat->contains("String") && (*pat)["String"].is_string()) {
      regex = escape_literal((*pat)["String"].get<std::string>());
    } else {
      return bad(source, "pre_tokenizer: Split without a Regex or String pattern");
    }
    if (behavior != "Isolated" || p.value("invert", false)) {
      return bad(source,
                 "pre_tokenizer: Split behavior '" + printable(behavior, 80) + "' is unsupported");
    }
    return add_split(regex, v, source);
  }
  return bad(source, "pre_tokenizer: unsupported type '" + printable(type, 80) + "'");
}

Status read_normalizer(const json& n, BpeVocab& v, const std::string& source, int depth = 0) {
  if (n.is_null()) return Status::ok();
  if (depth > kMaxSequenceDepth) return bad(source, "normalizer: Sequences nested too deep");
  const std::string type = n.value("type", std::string());
  if (type == "NFC") {
    v.nfc = true;
    return Status::ok();
  }
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (const json& s : n["normalizers"]) HEARTH_TRY(read_normalizer(s, v, source, depth + 1));
    return Status::ok();
  }
  return bad(source, "normalizer: unsupported type '" + printable(type, 80) + "'");
}

struct TokenTable {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  int32_t find(const std::string& s) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == s && types[i] != TokenType::kUnused) return static_cast<int32_t>(i);
    }
    return -1;
  }
};

// model.vocab plus added_tokens (special ones are control tokens) as one id-indexed table.
Result<TokenTable> read_token_table(const json& j, const json& m, const std::string& source) {
  if (!m.contains("vocab") || !m["vocab"].is_object()) return bad(source, "model.vocab: missing");
  std::vector<std::pair<int64_t, std::string>> entries;
  int64_t max_id = -1;
  auto add_entry = [&](int64_t id, const std::string& s, const char* field) -> Status {
    if (id < 0 || id >= 0x7FFFFFFF) {
      return bad(source, std::string(field) + ": id " + std::to_string(id) + " out of range");
    }
    entries.emplace_back(id, s);
    max_id = std::max(max_id, id);
    return Status::ok();
  };
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) return bad(source, "model.vocab: non-integer id");
    HEARTH_TRY(add_entry(it.value().get<int64_t>(), it.key(), "model.vocab"));
  }
  std::vector<std::pair<int64_t, bool>> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string()) {
        return bad(source, "added_tokens: entry without id and content");
      }
      HEARTH_TRY(
          add_entry(a["id"].get<int64_t>(), a["content"].get<std::string>(), "added_tokens"));
      added.emplace_back(a["id"].get<int64_t>(), a.value("special", false));
    }
  }
  if (max_id < 0) return bad(source, "model.vocab: empty");
  if (max_id > 8 * static_cast<int64_t>(entries.size()) + 1024) {
    return bad(source, "model.vocab: ids are too sparse (max id " + std::to_string(max_id) + ")");
  }
  TokenTable t;
  t.tokens.assign(max_id + 1, std::string());
  t.types.assign(max_id + 1, TokenType::kUnused);
  for (auto& [id, s] : entries) {
    t.tokens[id] = s;
    t.types[id] = TokenType::kNormal;
  }
  for (auto [id, special] : added) {
    t.types[id] = special ? TokenType::kControl : TokenType::kUserDefined;
  }
  return t;
}

// The ids a post-processor puts around a sequence: TemplateProcessing ("<|begin_of_text|> $A",
// "[CLS] $A [SEP]") or BertProcessing ({"cls": ["[CLS]", 101], "sep": ["[SEP]", 102]}).
struct Wrapping {
  int32_t bos = -1, eos = -1;
};
Wrapping read_post_processor(const json& j, const TokenTable& t) {
  Wrapping w;
  std::vector<const json*> procs;
  const json post = j.value("post_processor", json());
  if (post.is_object()) {
    if (post.value("type", std::string()) == "Sequence" && post.contains("processors") &&
        post["processors"].is_array()) {
      for (const json& p : post["processors"]) procs.push_back(&p);
    } else {
      procs.push_back(&post);
    }
  }
  auto pair_token = [&](const json& p, const char* key) -> int32_t {
    if (!p.contains(key) || !p[key].is_array() || p[key].empty() || !p[key][0].is_string())
      return -1;
    return t.find(p[key][0].get<std::string>());
  };
  for (const json* p : procs) {
    const std::string type = p->value("type", std::string());
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      w.bos = pair_token(*p, "cls");
      w.eos = pair_token(*p, "sep");
      continue;
    }
    if (type != "TemplateProcessing" || !p->contains("single") || !(*p)["single"].is_array() ||
        (*p)["single"].empty()) {
      continue;
    }
    const json& single = (*p)["single"];
    auto token_of = [&](const json& item) -> int32_t {  // {"SpecialToken": {"id": "<s>", ...}}
      if (!item.is_object() || !item.contains("SpecialToken")) return -1;
      const json& st = item["SpecialToken"];
      if (!st.is_object() || !st.contains("id") || !st["id"].is_string()) return -1;
      return t.find(st["id"].get<std::string>());
    };
    if (int32_t b = token_of(single.front()); b >= 0) w.bos = b;
    if (single.size() > 1) {
      if (int32_t e = token_of(single.back()); e >= 0) w.eos = e;
    }
  }
  return w;
}

Result<BpeVocab> read_bpe(const json& j, const json& m, const std::string& source) {
  BpeVocab v;
  if (m.value("byte_fallback", false)) {
    return bad(source, "model.byte_fallback: SentencePiece-style BPE needs tokenizer.model");
  }
  v.ignore_merges = m.value("ignore_merges", false);
  HEARTH_ASSIGN_OR_RETURN(TokenTable t, read_token_table(j, m, source));
  if (!m.contains("merges") || !m["merges"].is_array()) return bad(source, "model.merges: missing");
  const json& merges = m["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    if (e.is_string()) {
      const std::string s = e;
      const size_t sp = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos) {
        return bad(source, "model.merges[" + std::to_string(i) + "]: not \"a b\"");
      }
      v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      v.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      return bad(source, "model.merges[" + std::to_string(i) + "]: not a string or a pair");
    }
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    v.unk_id = t.find(m["unk_token"].get<std::string>());
    v.model_unk_id = v.unk_id;
  }
  HEARTH_TRY(read_normalizer(j.value("normalizer", json()), v, source));
  HEARTH_TRY(read_pre(j.value("pre_tokenizer", json()), v, source));
  const json dec = j.value("decoder", json());
  if (!dec.is_null() && dec.value("type", std::string()) != "ByteLevel") {
    return bad(source, "decoder: only ByteLevel is supported for BPE, got " +
                           dec.value("type", std::string("?")));
  }
  const Wrapping w = read_post_processor(j, t);
  if (w.bos >= 0) v.bos_id = w.bos, v.add_bos = true;
  if (w.eos >= 0) v.eos_id = w.eos, v.add_eos = true;
  v.tokens = std::move(t.tokens);
  v.types = std::move(t.types);
  return v;
}

// BERT: WordPiece model, BertNormalizer (strip_accents null follows lowercase), BertPreTokenizer.
Result<WordPieceVocab> read_wordpiece(const json& j, const json& m, const std::string& source) {
  WordPieceVocab v;
  HEARTH_ASSIGN_OR_RETURN(TokenTable t, read_token_table(j, m, source));
  const std::string unk = m.value("unk_token", std::string("[UNK]"));
  v.unk_id = t.find(unk);
  if (v.unk_id < 0)
    return bad(source, "model.unk_token '" + printable(unk, 80) + "' is not in the vocabulary");
  if (m.contains("continuing_subword_prefix") && m["continuing_subword_prefix"].is_string())
    v.continuation_prefix = m["continuing_subword_prefix"].get<std::string>();
  if (m.contains("max_input_chars_per_word") && m["max_input_chars_per_word"].is_number_unsigned())
    v.max_input_chars_per_word = m["max_input_chars_per_word"].get<size_t>();
  const json n = j.value("normalizer", json());
  if (n.is_null()) {
    v.lowercase = v.strip_accents = false;
  } else if (n.value("type", std::string()) == "BertNormalizer") {
    v.lowercase = n.value("lowercase", true);
    const json sa = n.value("strip_accents", json());
    v.strip_accents = sa.is_boolean() ? sa.get<bool>() : v.lowercase;
  } else {
    return bad(source, "normalizer: WordPiece needs BertNormalizer, got '" +
                           n.value("type", std::string("?")) + "'");
  }
  const json pre = j.value("pre_tokenizer", json());
  if (!pre.is_null() && pre.value("type", std::string()) != "BertPreTokenizer") {
    return bad(source, "pre_tokenizer: WordPiece needs BertPreTokenizer, got '" +
                           pre.value("type", std::string("?")) + "'");
  }
  const Wrapping w = read_post_processor(j, t);
  v.bos_id = w.bos, v.add_bos = w.bos >= 0;
  v.eos_id = w.eos, v.add_eos = w.eos >= 0;
  v.tokens = std::move(t.tokens);
  v.types = std::move(t.types);
  return v;
}

Result<HfTokenizerModel> read_model(const json& j, const std::string& source) {
  if (!j.contains("model") || !j["model"].is_object()) return bad(source, "model: missing");
  const json& m = j["model"];
  const std::string type = m.value("type", std::string("BPE"));
  HfTokenizerModel out;
  if (type == "BPE") {
    HEARTH_ASSIGN_OR_RETURN(out.bpe, read_bpe(j, m, source));
  } else if (type == "WordPiece") {
    HEARTH_ASSIGN_OR_RETURN(out.wordpiece, read_wordpiece(j, m, source));
  } else {
    return bad(source, "model.type '" + printable(type, 80) + "' is not BPE or WordPiece");
  }
  return out;
}

}  // namespace

Result<HfTokenizerModel> parse_hf_tokenizer_json_model(const std::string& text,
                                                       const std::string& source) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad(source, "not valid JSON");
  // The readers check what they rely on; a field of another type than the one its reader
  // converts to (json::value and get throw then) is the file's error, not a crash.
  try {
    return read_model(j, source);
  } catch (const json::exception& e) {
    return bad(source, std::string("a field has the wrong type (") + e.what() + ")");
  }
}

Result<BpeVocab> parse_hf_tokenizer_json(const std::string& text, const std::string& source) {
  HEARTH_ASSIGN_OR_RETURN(HfTokenizerModel model, parse_hf_tokenizer_json_model(text, source));
  if (!model.bpe) return bad(source, "model.type 'WordPiece' is not BPE");
  return std::move(*model.bpe);
}

}  // namespace hearth
