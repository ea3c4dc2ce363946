// `hearth run`: one prompt in, streamed text out; timings on stderr; --json for scripts.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/mapped-file.h"
#include "command.h"
#include "common.h"
#include "output-format-args.h"
#include "process-clock.h"
#include "runtime/chat-format.h"
#include "runtime/session.h"

namespace hearth::cli {
namespace {

struct RunArgs {
  RuntimeArgs rt;
  std::string prompt, tokens_text, file;
  int32_t n_predict = -1;
  bool ignore_eos = false, json = false, no_display_prompt = false;
  bool chat = false;  // apply the chat template to the prompt as one user turn
  std::string system, template_file, template_name;
  std::vector<std::string> stop;
  SamplingParams sampling;
  OutputFormatArgs format;
};

void run(const RunArgs& a) {
  // Compiled before the model loads, so a bad grammar fails fast.
  const std::shared_ptr<const Grammar> grammar = output_grammar_or_exit(a.format);
  auto engine = load_engine_or_exit(a.rt, a.json);
  const double loaded_at = ms_since_start();
  const Tokenizer& tok = engine->tokenizer();
  std::vector<int32_t> prompt;
  std::string prompt_text = a.prompt;
  if (!a.file.empty()) prompt_text = check(read_text_file(a.file));
  std::vector<std::string> chat_stops;
  if (!a.tokens_text.empty()) {
    prompt = parse_token_list(a.tokens_text);  // used exactly as given, no BOS
  } else if (a.chat) {
    ChatFormat format = check(resolve_chat_format(*engine, a.template_file, a.template_name));
    std::vector<ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system, {}});
    messages.push_back({"user", prompt_text, {}});
    prompt = check(tokenize_chat(*engine, format, messages));
    chat_stops = format.stops;
    if (!a.json) std::fprintf(stderr, "hearth: chat template %s\n", format.label.c_str());
  } else {
    prompt = tok.encode(prompt_text, /*add_special=*/true);
    if (prompt.empty()) fail("the prompt is empty");
  }
  Session session(engine, context_size(a.rt, *engine), kv_cache_types(a.rt));
  check(session.init());
  const double session_at = ms_since_start();
  double first_token_at = -1;

  GenerateOptions opt;
  opt.max_tokens = a.n_predict;
  opt.ignore_eos = a.ignore_eos;
  opt.sampling = a.sampling;
  opt.stop = a.stop;
  opt.stop.insert(opt.stop.end(), chat_stops.begin(), chat_stops.end());
  if (grammar) opt.constraint = make_constraint(*engine, grammar);
  if (!a.json && !a.no_display_prompt && !a.chat) {
    std::fputs(a.tokens_text.empty() ? prompt_text.c_str() : tok.decode(prompt).c_str(), stdout);
    std::fflush(stdout);
  }
  auto result = check(session.generate(prompt, opt, [&](int32_t, const std::string& piece) {
    if (first_token_at < 0) first_token_at = ms_since_start();
    if (!a.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  }));
  const GenerateStats& st = result.stats;
  if (a.json) {
    nlohmann::json j;
    j["prompt_tokens"] = prompt;
    j["tokens"] = result.tokens;
    j["text"] = result.text;
    j["finish_reason"] = st.finish_reason;
    j["timings"] = {{"load_ms", engine->load_ms()},
                    {"prompt_ms", st.prompt_ms},
                    {"prompt_tok_s", st.prompt_tok_s()},
                    {"ttft_ms", st.ttft_ms},
                    {"gen_ms", st.gen_ms},
                    {"gen_tok_s", st.gen_tok_s()}};
    // Milliseconds since the binary's static initialisation (exec_ms: exec -> that point).
    j["startup"] = {{"exec_ms", exec_to_start_ms()},
                    {"loaded_ms", loaded_at},
                    {"session_ms", session_at},
                    {"first_token_ms", first_token_at}};
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::puts("");
  }
  std::fflush(stdout);  // the text ends before the timing line when both go to one terminal
  std::fprintf(stderr,
               "hearth: load %.1f ms | prompt %lld tokens, %.1f tok/s | generation %lld tokens, "
               "%.1f tok/s, %.2f ms/token | ttft %.1f ms\n",
               engine->load_ms(), (long long)st.prompt_tokens, st.prompt_tok_s(),
               (long long)st.generated_tokens, st.gen_tok_s(),
               st.gen_tok_s() > 0 ? 1000.0 / st.gen_tok_s() : 0.0, st.ttft_ms);
  if (a.rt.verbose)
    std::fprintf(stderr,
                 "hearth: start-up: exec -> main %.0f ms (10 ms resolution), then engine loaded "
                 "at %.1f ms, session ready at %.1f ms, first token at %.1f ms\n",
                 exec_to_start_ms(), loaded_at, session_at, first_token_at);
  exit_without_teardown(0);
}

void setup(CLI::App& root) {
  static RunArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("run", "generate text from a prompt");
  add_runtime_options(cmd, &a->rt);
  add_sampling_options(cmd, &a->sampling);
  add_output_format_options(cmd, &a->format);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "prompt text");
  auto* t = cmd->add_option("--tokens", a->tokens_text, "prompt as token ids 1,2,3 (no BOS added)");
  auto* f = cmd->add_option("-f,--file", a->file, "read the prompt from a file");
  p->excludes(t)->excludes(f);
  t->excludes(f);
  cmd->add_option("-n,--n-predict", a->n_predict, "tokens to generate (-1: until EOS/context end)");
  cmd->add_option("--stop", a->stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence");
  cmd->add_flag("--json", a->json, "print one JSON object with ids, text and timings");
  cmd->add_flag("--no-display-prompt", a->no_display_prompt, "do not echo the prompt");
  cmd->add_flag("--chat", a->chat, "wrap the prompt as one user turn with the chat template");
  cmd->add_option("--system", a->system, "system message (with --chat)");
  cmd->add_option("--template", a->template_file, "Jinja chat template file (with --chat)");
  cmd->add_option("--template-name", a->template_name,
                  "built-in template: llama2, llama3, chatml, mistral, gemma (with --chat)");
  cmd->callback([a] {
    if (a->prompt.empty() && a->tokens_text.empty() && a->file.empty())
      fail("run: give a prompt with -p TEXT, --tokens IDS or -f FILE");
    run(*a);
  });
}

HEARTH_REGISTER_COMMAND(10, setup);

}  // namespace
}  // namespace hearth::cli
