// `hearth tokenize`: text (or a file's exact bytes) to token ids. Loads only the tokenizer.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/mapped-file.h"
#include "command.h"
#include "formats/gguf.h"
#include "model-arg.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {
namespace {

struct TokenizeArgs {
  ModelArg model;
  std::string prompt, file;
  bool no_bos = false, json = false, show_pieces = false, parse_special = false;
};

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (is_directory(path)) return check(Tokenizer::from_hf_dir(path));
  GgufFile g = check(GgufFile::open(path));
  auto tok = Tokenizer::from_gguf(g);
  if (!tok.is_ok()) fail(tok.status().with_context(path));
  return std::move(tok).value();
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
  cmd->add_flag("--no-bos", a->no_bos, "do not add BOS/EOS");
  cmd->add_flag("--json", a->json, "print a JSON array");
  cmd->add_flag("--show-pieces", a->show_pieces, "print each id with its vocabulary entry");
  cmd->add_flag("--parse-special", a->parse_special, "recognise special-token texts like <s>");
  cmd->callback([a] {
    if (a->prompt.empty() && a->file.empty()) fail("tokenize: give -p TEXT or --file PATH");
    run(*a);
  });
}

HEARTH_REGISTER_COMMAND(30, setup);

}  // namespace
}  // namespace hearth::cli
