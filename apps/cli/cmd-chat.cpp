// `hearth chat`: an interactive conversation with line editing, streamed answers and slash
// commands (/reset, /save, /load, /set, /stats, /quit). New commands go in handle_command.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <optional>

#include "base/mapped-file.h"
#include "command.h"
#include "common.h"
#include "runtime/chat-format.h"
#include "runtime/chat/chat-template.h"
#include "runtime/session.h"

#if HEARTH_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace hearth::cli {
namespace {

// Set by SIGINT. While an answer streams it stops the answer; at the prompt it clears the line.
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted.store(true);
}

struct ChatArgs {
  RuntimeArgs rt;
  SamplingParams sampling;
  std::string system, template_file, template_name;
  int32_t n_predict = -1;
  bool ignore_eos = false;
};

// One line of input: libedit (editing + history) on a terminal, plain reads otherwise.
class LineReader {
 public:
  LineReader() : tty_(isatty(STDIN_FILENO) != 0) {}

  // nullopt at end of input; an interrupted read (Ctrl-C at the prompt) returns "".
  std::optional<std::string> read(const char* prompt) {
    std::fflush(stdout);
#if HEARTH_HAVE_LIBEDIT
    if (tty_) {
      char* line = readline(prompt);
      if (!line) {
        if (g_interrupted.exchange(false)) {
          std::fputs("\n", stdout);
          return std::string();
        }
        return std::nullopt;
      }
      std::string s(line);
      std::free(line);
      if (!s.empty()) add_history(s.c_str());
      return s;
    }
#endif
    if (tty_) std::fputs(prompt, stdout);
    std::fflush(stdout);
    std::string s;
    int c;
    while ((c = std::fgetc(stdin)) != EOF && c != '\n') s += char(c);
    if (c == EOF && s.empty()) {
      if (g_interrupted.exchange(false) && !std::feof(stdin)) {
        std::clearerr(stdin);
        std::fputs("\n", stdout);
        return std::string();
      }
      return std::nullopt;
    }
    return s;
  }

 private:
  bool tty_;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

class Chat {
 public:
  Chat(const ChatArgs& a, std::shared_ptr<Engine> engine)
      : args_(a), engine_(std::move(engine)), sampling_(a.sampling) {}

  void run() {
    pick_template();
    session_ = std::make_unique<Session>(engine_, context_size(args_.rt, *engine_),
                                         kv_cache_types(args_.rt));
    check(session_->init());
    reset_messages();
    std::printf("hearth chat: %s | context %lld tokens | template %s\n", engine_->name().c_str(),
                (long long)session_->n_ctx(), template_label_.c_str());
    std::printf("Type a message; /help lists commands; Ctrl-C stops an answer; /quit leaves.\n");
    while (true) {
      auto line = reader_.read("> ");
      if (!line) break;
      const std::string text = trim(*line);
      if (text.empty()) continue;
      if (text[0] == '/') {
        if (!handle_command(text)) break;
        continue;
      }
      messages_.push_back({"user", text, {}});
      if (!answer()) messages_.pop_back();  // nothing was generated for it
    }
    std::fflush(stdout);
  }

 private:
  void pick_template() {
    ChatFormat f = check(resolve_chat_format(*engine_, args_.template_file, args_.template_name));
    template_ = f.template_text;
    template_label_ = f.label;
    stops_ = f.stops;
    chat_tokenizer_ = f.tokenizer;
  }

  void reset_messages() {
    messages_.clear();
    if (!args_.system.empty()) messages_.push_back({"system", args_.system, {}});
  }

  Result<std::vector<int32_t>> tokenize(const std::vector<ChatMessage>& msgs) const {
    return tokenize_chat(*engine_, ChatFormat{template_, template_label_, stops_, chat_tokenizer_},
                         msgs);
  }

  // Index of the first droppable message (after the system prompt), or npos.
  size_t first_turn() const {
    const size_t start = (!messages_.empty() && messages_[0].role == "system") ? 1 : 0;
    return messages_.size() > start + 1 ? start : std::string::npos;
  }

  // Makes the prompt fit with room for an answer, asking before dropping anything.
  std::optional<std::vector<int32_t>> fitted_prompt() {
    auto prompt = tokenize(messages_);
    if (!prompt.is_ok()) {
      std::printf("[template error: %s]\n", prompt.message().c_str());
      return std::nullopt;
    }
    const int64_t n_ctx = session_->n_ctx();
    const int64_t room = std::min<int64_t>(256, n_ctx / 4);
    if (int64_t(prompt->size()) + room <= n_ctx) return prompt.value();
    // Find how many of the oldest turns must go; the newest user message always stays.
    std::vector<ChatMessage> trial = messages_;
    size_t dropped = 0;
    std::vector<int32_t> fitted;
    while (true) {
      const size_t start = (!trial.empty() && trial[0].role == "system") ? 1 : 0;
      if (trial.size() <= start + 1) break;
      // Drop a whole exchange (user + assistant) so roles keep alternating.
      const size_t n = (trial.size() > start + 2 && trial[start + 1].role != "user") ? 2 : 1;
      trial.erase(trial.begin() + long(start), trial.begin() + long(start + n));
      dropped += n;
      auto t = tokenize(trial);
      if (t.is_ok() && int64_t(t->size()) + room <= n_ctx) {
        fitted = std::move(t).value();
        break;
      }
    }
    std::printf(
        "[the conversation is %zu tokens; with room for an answer it no longer fits the "
        "%lld-token context]\n",
        prompt->size(), (long long)n_ctx);
    if (fitted.empty()) {
      std::printf("[your message alone is too long for this context: shorten it, or /reset]\n");
      return std::nullopt;
    }
    auto reply = reader_.read(
        ("Drop the oldest " + std::to_string(dropped) + " message(s) to make room? [y/N] ")
            .c_str());
    if (!reply || (trim(*reply) != "y" && trim(*reply) != "Y" && trim(*reply) != "yes")) {
      std::printf(
          "[nothing dropped: /save the conversation, /reset it, or send a shorter message]\n");
      return std::nullopt;
    }
    messages_ = std::move(trial);
    std::printf("[dropped the oldest %zu message(s)]\n", dropped);
    return fitted;
  }

  bool answer() {
    auto prompt = fitted_prompt();
    if (!prompt) return false;
    GenerateOptions opt;
    opt.max_tokens = args_.n_predict;
    opt.ignore_eos = args_.ignore_eos;
    opt.sampling = sampling_;
    opt.stop = stops_;
    g_interrupted.store(false);
    bool started = false;  // leading whitespace of the answer is not shown
    auto r = session_->generate(*prompt, opt, [&](int32_t, const std::string& piece) {
      if (g_interrupted.load()) return false;
      std::string out = piece;
      if (!started) {
        const size_t b = out.find_first_not_of(" \n");
        out = b == std::string::npos ? "" : out.substr(b);
        started = !out.empty();
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    g_interrupted.store(false);
    std::fputs("\n", stdout);
    if (!r.is_ok()) {
      std::printf("[error: %s]\n", r.message().c_str());
      return false;
    }
    last_ = r->stats;
    have_stats_ = true;
    if (last_.finish_reason == "cancelled") std::printf("[interrupted]\n");
    if (last_.finish_reason == "context")
      std::printf(
          "[the context is full (%lld tokens): the answer was cut; your next message will "
          "offer to drop the oldest turns, or /reset]\n",
          (long long)session_->n_ctx());
    messages_.push_back({"assistant", trim(r->text), {}});
    return true;
  }

  // Returns false to leave the chat.
  bool handle_command(const std::string& line) {
    const size_t sp = line.find(' ');
    const std::string cmd = line.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : trim(line.substr(sp + 1));
    if (cmd == "/quit" || cmd == "/exit" || cmd == "/bye") return false;
    if (cmd == "/help") {
      std::printf(
          "/reset            forget the conversation (the system prompt stays)\n"
          "/save FILE        write the conversation as JSON\n"
          "/load FILE        replace the conversation with a saved one\n"
          "/set KEY VALUE    temp, top-k, top-p, min-p, repeat-penalty, repeat-last-n, seed, "
          "n-predict (/set alone shows them)\n"
          "/stats            speed of the last answer and context use\n"
          "/quit             leave (Ctrl-D too)\n");
    } else if (cmd == "/reset") {
      reset_messages();
      session_->reset();
      std::printf("[conversation cleared]\n");
    } else if (cmd == "/save") {
      if (rest.empty()) {
        std::printf("[usage: /save FILE]\n");
      } else {
        auto json = chat_messages_to_json(messages_);
        std::ofstream f(rest, std::ios::binary);
        if (json.is_ok()) f << json.value() << "\n";
        if (!json.is_ok() || !f.good())
          std::printf("[could not write %s]\n", rest.c_str());
        else
          std::printf("[saved %zu messages to %s]\n", messages_.size(), rest.c_str());
      }
    } else if (cmd == "/load") {
      auto text = read_text_file(rest);
      auto msgs = text.is_ok() ? parse_chat_messages_json(text.value(), rest)
                               : Result<std::vector<ChatMessage>>(text.status());
      if (!msgs.is_ok()) {
        std::printf("[could not load: %s]\n", msgs.message().c_str());
      } else {
        messages_ = std::move(msgs).value();
        std::printf("[loaded %zu messages from %s]\n", messages_.size(), rest.c_str());
      }
    } else if (cmd == "/set") {
      set_option(rest);
    } else if (cmd == "/stats") {
      print_stats();
    } else {
      std::printf("[unknown command %s; /help lists them]\n", cmd.c_str());
    }
    return true;
  }

  void set_option(const std::string& rest) {
    const size_t sp = rest.find(' ');
    const std::string key = rest.substr(0, sp);
    const std::string value = sp == std::string::npos ? "" : trim(rest.substr(sp + 1));
    if (key.empty()) {
      std::printf(
          "[temp %.3g | top-k %d | top-p %.3g | min-p %.3g | repeat-penalty %.3g | "
          "repeat-last-n %d | seed %llu | n-predict %d]\n",
          sampling_.temperature, sampling_.top_k, sampling_.top_p, sampling_.min_p,
          sampling_.repeat_penalty, sampling_.repeat_last_n, (unsigned long long)sampling_.seed,
          args_.n_predict);
      return;
    }
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || !end || *end) {
      std::printf("[/set %s: '%s' is not a number]\n", key.c_str(), value.c_str());
      return;
    }
    if (key == "temp" || key == "temperature")
      sampling_.temperature = float(v);
    else if (key == "top-k")
      sampling_.top_k = int32_t(v);
    else if (key == "top-p")
      sampling_.top_p = float(v);
    else if (key == "min-p")
      sampling_.min_p = float(v);
    else if (key == "repeat-penalty")
      sampling_.repeat_penalty = float(v);
    else if (key == "repeat-last-n")
      sampling_.repeat_last_n = int32_t(v);
    else if (key == "seed")
      sampling_.seed = uint64_t(v);
    else if (key == "n-predict")
      args_.n_predict = int32_t(v);
    else {
      std::printf("[unknown setting '%s'; /set alone lists them]\n", key.c_str());
      return;
    }
    std::printf("[%s = %s]\n", key.c_str(), value.c_str());
  }

  void print_stats() const {
    const int64_t used = int64_t(session_->history().size());
    if (have_stats_) {
      std::printf(
          "[last answer: %lld tokens at %.1f tok/s | prompt %lld tokens (%lld computed) at "
          "%.1f tok/s | ttft %.0f ms]\n",
          (long long)last_.generated_tokens, last_.gen_tok_s(), (long long)last_.prompt_tokens,
          (long long)last_.prompt_evaluated, last_.prompt_tok_s(), last_.ttft_ms);
    } else {
      std::printf("[no answer yet]\n");
    }
    std::printf("[context: %lld of %lld tokens used (%.0f%%), %zu messages]\n", (long long)used,
                (long long)session_->n_ctx(), 100.0 * double(used) / double(session_->n_ctx()),
                messages_.size());
  }

  ChatArgs args_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<Session> session_;
  SamplingParams sampling_;
  std::string template_, template_label_;
  std::vector<std::string> stops_;
  std::shared_ptr<const ChatTokenizer> chat_tokenizer_;
  std::vector<ChatMessage> messages_;
  LineReader reader_;
  GenerateStats last_;
  bool have_stats_ = false;
};

void setup(CLI::App& root) {
  static ChatArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand("chat", "talk with a model interactively");
  add_runtime_options(cmd, &a->rt);
  add_sampling_options(cmd, &a->sampling);
  cmd->add_option("--system", a->system, "system prompt");
  auto* t = cmd->add_option("--template", a->template_file, "Jinja chat template file");
  auto* n = cmd->add_option("--template-name", a->template_name,
                            "built-in template: llama2, llama3, chatml, mistral, gemma");
  t->excludes(n);
  cmd->add_option("-n,--n-predict", a->n_predict, "most tokens per answer (-1: until the end)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep answering past end-of-sequence");
  cmd->callback([a] {
    // Ctrl-C stops the current answer, not the program. SA_RESTART is left off so a read at the
    // prompt returns and the line can be cleared.
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    auto engine = load_engine_or_exit(a->rt);
    Chat(*a, engine).run();
  });
}

HEARTH_REGISTER_COMMAND(15, setup);

}  // namespace
}  // namespace hearth::cli
