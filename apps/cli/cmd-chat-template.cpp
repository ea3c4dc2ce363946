// `hearth chat-template`: renders a chat template over a messages file and prints exactly the
// prompt (nothing added), for scripts. Reads only metadata; the model's weights are not loaded.
#include <cstdio>

#include "base/mapped-file.h"
#include "command.h"
#include "formats/gguf.h"
#include "formats/hf-config.h"
#include "model-arg.h"
#include "runtime/chat/chat-template.h"

namespace hearth::cli {
namespace {

struct ChatTemplateArgs {
  ModelArg model;
  std::string template_file, template_name, messages_file, vars_file;
  bool add_generation_prompt = false;
  std::string bos_token, eos_token;
  bool bos_given = false, eos_given = false;
};

struct ModelTemplate {
  std::string text;  // "" when the model carries none
  std::string bos, eos;
  std::string name, arch;  // for picking a fallback
};

std::string token_text(const GgufFile& g, const char* id_key) {
  auto id = g.get_int(id_key);
  auto tokens = g.get_string_array("tokenizer.ggml.tokens");
  if (!id.is_ok() || !id.value() || !tokens.is_ok() || !tokens.value()) return "";
  const int64_t i = *id.value();
  if (i < 0 || uint64_t(i) >= tokens.value()->size()) return "";
  return (*tokens.value())[size_t(i)];
}

Result<ModelTemplate> read_model_template(const std::string& path) {
  ModelTemplate t;
  if (is_directory(path)) {
    const std::string cfg_path = path + "/tokenizer_config.json";
    if (file_exists(cfg_path)) {
      HEARTH_ASSIGN_OR_RETURN(std::string text, read_text_file(cfg_path));
      HEARTH_ASSIGN_OR_RETURN(HfTokenizerConfig cfg, parse_hf_tokenizer_config(text, cfg_path));
      t.text = cfg.chat_template;
      t.bos = cfg.bos_token;
      t.eos = cfg.eos_token;
    }
    // Newer transformers releases keep the template in its own file; it wins when present.
    if (file_exists(path + "/chat_template.jinja")) {
      HEARTH_ASSIGN_OR_RETURN(t.text, read_text_file(path + "/chat_template.jinja"));
    }
    t.name = path;
    return t;
  }
  HEARTH_ASSIGN_OR_RETURN(GgufFile g, GgufFile::open(path));
  HEARTH_ASSIGN_OR_RETURN(auto tmpl, g.get_string("tokenizer.chat_template"));
  if (tmpl) t.text = *tmpl;
  t.bos = token_text(g, "tokenizer.ggml.bos_token_id");
  t.eos = token_text(g, "tokenizer.ggml.eos_token_id");
  HEARTH_ASSIGN_OR_RETURN(auto name, g.get_string("general.name"));
  HEARTH_ASSIGN_OR_RETURN(auto arch, g.get_string("general.architecture"));
  t.name = name ? *name : path;
  t.arch = arch ? *arch : "";
  return t;
}

// Messages piped in (`--messages -`); capped like files so a runaway pipe cannot exhaust memory.
std::string read_stdin() {
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) {
    text.append(buf, n);
    if (text.size() > (64u << 20)) fail("--messages -: more than 64 MiB on stdin");
  }
  return text;
}

std::string fallback_list() {
  std::string names;
  for (auto n : builtin_chat_template_names())
    names += (names.empty() ? "" : ", ") + std::string(n);
  return names;
}

void run(const ChatTemplateArgs& a) {
  std::string tmpl, bos = a.bos_token, eos = a.eos_token;
  if (!a.template_file.empty()) {
    tmpl = check(read_text_file(a.template_file));
  } else if (!a.template_name.empty()) {
    auto b = builtin_chat_template(a.template_name);
    if (!b)
      fail("--template-name: unknown template '" + a.template_name +
           "' (known: " + fallback_list() + ")");
    tmpl = std::string(*b);
  }
  if (!a.model.model.empty() || !a.model.repo_id.empty()) {
    const std::string path = check(resolve_model(a.model));
    auto mt = read_model_template(path);
    if (!mt.is_ok()) fail(mt.status().with_context(path));
    if (!a.bos_given) bos = mt->bos;
    if (!a.eos_given) eos = mt->eos;
    if (tmpl.empty()) {
      tmpl = mt->text;
      if (tmpl.empty()) {
        auto guess = guess_chat_template_name(mt->name, mt->arch);
        if (!guess)
          fail(path + ": the model carries no chat template; choose one with --template-name (" +
               fallback_list() + ") or --template FILE.jinja");
        std::fprintf(stderr, "hearth: note: %s has no chat template; using the built-in '%s'\n",
                     path.c_str(), guess->c_str());
        tmpl = std::string(*builtin_chat_template(*guess));
      }
    }
  }
  if (tmpl.empty() && a.template_file.empty())
    fail("chat-template: give -m MODEL, --template FILE.jinja or --template-name NAME");

  const std::string msgs_text =
      a.messages_file == "-" ? read_stdin() : check(read_text_file(a.messages_file));
  const std::vector<ChatMessage> messages =
      check(parse_chat_messages_json(msgs_text, a.messages_file));
  jinja::Variables extra;
  if (!a.vars_file.empty()) {
    const jinja::Value vars = check(json_to_value(check(read_text_file(a.vars_file)), a.vars_file));
    if (!vars.is_dict()) fail(a.vars_file + ": expected a JSON object of template variables");
    for (const auto& [k, v] : vars.entries().entries) extra.emplace_back(k, v);
  }
  auto out = render_chat_template(tmpl, messages, a.add_generation_prompt, bos, eos, extra);
  if (!out.is_ok())
    fail(out.status().with_context(a.template_file.empty() ? "chat template" : a.template_file));
  std::fwrite(out->data(), 1, out->size(), stdout);
  std::fflush(stdout);
}

void setup(CLI::App& root) {
  static ChatTemplateArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand(
      "chat-template", "render a chat template over a messages file; prints exactly the prompt");
  add_model_options(cmd, &a->model);
  auto* t = cmd->add_option("--template", a->template_file,
                            "Jinja template file (overrides the model's)");
  auto* n = cmd->add_option("--template-name", a->template_name,
                            "built-in template: llama2, llama3, chatml, mistral, gemma");
  t->excludes(n);
  cmd->add_option("--messages", a->messages_file,
                  "JSON file: [{\"role\": ..., \"content\": ...}, ...] ('-' = stdin)")
      ->required();
  cmd->add_flag("--add-generation-prompt", a->add_generation_prompt,
                "end with the assistant header so the model answers next");
  auto* b = cmd->add_option("--bos-token", a->bos_token, "bos_token text (default: the model's)");
  auto* e = cmd->add_option("--eos-token", a->eos_token, "eos_token text (default: the model's)");
  cmd->add_option("--vars", a->vars_file, "JSON object of extra template variables (tools, ...)");
  cmd->callback([a, b, e] {
    a->bos_given = b->count() > 0;
    a->eos_given = e->count() > 0;
    run(*a);
  });
}

HEARTH_REGISTER_COMMAND(36, setup);

}  // namespace
}  // namespace hearth::cli
