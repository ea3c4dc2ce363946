// `hearth tokenize`: text (or a file's exact bytes) to token ids. Loads only the tokenizer.
// --compare tokenizer.json checks the model's tokenizer against that file's over a corpus.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/mapped-file.h"
#include "command.h"
#include "formats/gguf.h"
#include "model-arg.h"
#include "tokenizer/tokenizer-compare.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {
namespace {

struct TokenizeArgs {
  ModelArg model;
  std::string prompt, file;
  std::string compare, corpus;  // --compare tokenizer.json, --corpus FILE
  bool no_bos = false, json = false, show_pieces = false, parse_special = false;
};

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (is_directory(path)) return check(Tokenizer::from_hf_dir(path));
  GgufFile g = check(GgufFile::open(path));
  auto tok = Tokenizer::from_gguf(g);
  if (!tok.is_ok()) fail(tok.status().with_context(path));
  return std::move(tok).value();
}

// Prints a byte string as a C-style quoted literal, so whitespace and invalid bytes show.
std::string c_literal(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string id_list(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Exit status 0 when every corpus text gives the same ids both ways, 1 otherwise.
int run_compare(const TokenizeArgs& a) {
  const std::string path = check(resolve_model(a.model));
  auto tok = load_tokenizer(path);
  auto ref = check(Tokenizer::from_hf_json(a.compare));
  const std::vector<std::string> corpus =
      a.corpus.empty() ? builtin_tokenizer_corpus()
                       : corpus_from_text(check(read_text_file(a.corpus, uint64_t(1) << 30)));
  const TokenizerComparison c = compare_tokenizers(*tok, *ref, corpus, 5);
  for (const TokenizerMismatch& m : c.first) {
    std::printf("mismatch%s: %s\n  %s: %s\n  %s: %s\n", m.add_special ? " (with BOS/EOS)" : "",
                c_literal(m.text).c_str(), path.c_str(), id_list(m.got).c_str(), a.compare.c_str(),
                id_list(m.want).c_str());
  }
  std::printf("%s: %zu of %zu texts tokenize identically (%s vs %s)\n",
              c.mismatched == 0 ? "PASS" : "FAIL", c.texts - c.mismatched, c.texts,
              tok->kind().c_str(), ref->kind().c_str());
  return c.mismatched == 0 ? 0 : 1;
}

void run(const TokenizeArgs& a) {
  const std::string path = check(resolve_model(a.model));
  auto tok = load_tokenizer(path);
  std::string text = a.prompt;
  if (!a.file.empty()) text = check(read_text_file(a.file, uint64_t(1) << 30));
  std::vector<int32_t> ids = tok->encode(text, !a.no_bos, a.parse_special);
  if (a.no_bos && !ids.empty() && ids.front() == tok->bos_id() && tok->add_bos()) {
    // encode(add_special=false) never adds BOS; nothing to strip. Kept for clarity of intent.
  }
  if (a.json) {
    std::puts(nlohmann::json(ids).dump().c_str());
  } else if (a.show_pieces) {
    for (int32_t id : ids) std::printf("%6d -> '%s'\n", id, tok->token_text(id).c_str());
  } else {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::puts(line.c_str());
  }
}

void setup(CLI::App& root) {
  static TokenizeArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("tokenize", "print the token ids of a text");
  add_model_options(cmd, &a->model);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "text to tokenize");
  auto* f = cmd->add_option("--file", a->file, "tokenize this file's exact bytes");
  p->excludes(f);
  auto* c = cmd->add_option("--compare", a->compare,
                            "check the tokenizer against this HF tokenizer.json on a corpus "
                            "(exit status 1 on any difference)");
  cmd->add_option("--corpus", a->corpus, "with --compare: one text per line (default: built-in)")
      ->needs(c);
  c->excludes(p)->excludes(f);
  cmd->add_flag("--no-bos", a->no_bos, "do not add BOS/EOS");
  cmd->add_flag("--json", a->json, "print a JSON array");
  cmd->add_flag("--show-pieces", a->show_pieces, "print each id with its vocabulary entry");
  cmd->add_flag("--parse-special", a->parse_special, "recognise special-token texts like <s>");
  cmd->callback([a] {
    if (!a->compare.empty()) std::exit(run_compare(*a));
    if (a->prompt.empty() && a->file.empty()) fail("tokenize: give -p TEXT or --file PATH");
    run(*a);
  });
}

HEARTH_REGISTER_COMMAND(30, setup);

}  // namespace
}  // namespace hearth::cli
