// `hearth chat` driven like a person at a terminal, through tmux (send-keys / capture-pane):
// a turn, /stats, /reset, Ctrl-C in the middle of an answer, /save + /load, /quit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "support/test-data.h"

namespace hearth {
namespace {

// One private tmux server per test process, so nothing else running tmux is touched.
class Tmux {
 public:
  Tmux() : socket_("hearth-chat-test-" + std::to_string(getpid())) {}
  ~Tmux() { tmux({"kill-server"}); }

  test::CommandResult tmux(std::vector<std::string> args) {
    std::vector<std::string> argv = {"tmux", "-L", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run_command(argv);
  }
  std::string screen() {
    return tmux({"capture-pane", "-p", "-J", "-S", "-2000", "-t", "chat"}).out;
  }
  void keys(const std::string& text) { tmux({"send-keys", "-t", "chat", "-l", text}); }
  void enter() { tmux({"send-keys", "-t", "chat", "Enter"}); }
  void line(const std::string& text) {
    keys(text);
    enter();
  }
  // Waits (generously: the model runs on a loaded CI machine) until pred(screen) holds.
  template <class Pred>
  bool wait_for(Pred pred, int seconds = 120) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (pred(screen())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  bool wait_text(const std::string& needle, size_t occurrences = 1) {
    return wait_for([&](const std::string& s) { return count(s, needle) >= occurrences; });
  }
  static size_t count(const std::string& s, const std::string& needle) {
    size_t n = 0;
    for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
    return n;
  }

 private:
  std::string socket_;
};

std::string trim_copy(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

// The text printed after the line "> PROMPT" (the streamed answer, which may itself start with
// a line break), up to the next prompt.
std::string answer_after(const std::string& screen, const std::string& prompt_line) {
  const size_t p = screen.rfind(prompt_line + "\n");
  if (p == std::string::npos) return "";
  const size_t b = p + prompt_line.size() + 1;
  const size_t next_prompt = screen.find("\n> ", b);
  return screen.substr(b, next_prompt == std::string::npos ? std::string::npos : next_prompt - b);
}

TEST(ChatTmux, TurnResetInterruptSaveLoadQuit) {
  ASSERT_EQ(test::run_command({"tmux", "-V"}).exit_code, 0)
      << "tmux is required (apt-get install tmux)";
  const std::string model = test::shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf");
  ASSERT_FALSE(test::read_file(model).empty()) << "missing " << model;
  const std::string save = test::temp_dir() + "/conversation.json";

  Tmux t;
  // --ignore-eos keeps answers going so Ctrl-C reliably lands mid-answer; -n 24 bounds turns.
  // The wrapper shell ignores SIGINT (hearth installs its own handler): a non-interactive sh
  // would otherwise die of the Ctrl-C too once hearth exits, taking the pane with it.
  const std::string cmd = "trap '' INT; '" + test::hearth_cli() + "' chat -m '" + model +
                          "' --template-name llama2 --temp 0 -n 24 --ignore-eos -t 2"
                          "; echo CHAT-EXIT=$?; sleep 600";
  ASSERT_EQ(t.tmux({"new-session", "-d", "-s", "chat", "-x", "250", "-y", "60", "sh", "-c", cmd})
                .exit_code,
            0);
  ASSERT_TRUE(t.wait_text("/quit leaves.")) << t.screen();
  ASSERT_TRUE(t.wait_text("> ")) << t.screen();

  // A turn: the answer streams back and the prompt returns.
  t.line("In the beginning");
  ASSERT_TRUE(t.wait_for([](const std::string& s) {
    return Tmux::count(s, "\n> ") >= 1 && s.rfind("> ") > s.find("> In the beginning") + 20;
  })) << t.screen();
  t.line("/stats");
  ASSERT_TRUE(t.wait_text("[context: ")) << t.screen();
  std::string s = t.screen();
  EXPECT_FALSE(trim_copy(answer_after(s, "> In the beginning")).empty()) << s;
  EXPECT_NE(s.find("[last answer: 24 tokens"), std::string::npos) << s;
  EXPECT_NE(s.find("2 messages]"), std::string::npos) << s;

  // /save then /reset: the context empties.
  t.line("/save " + save);
  ASSERT_TRUE(t.wait_text("[saved 2 messages")) << t.screen();
  t.line("/reset");
  ASSERT_TRUE(t.wait_text("[conversation cleared]")) << t.screen();
  t.line("/stats");
  ASSERT_TRUE(t.wait_text("[context: 0 of ")) << t.screen();
  EXPECT_NE(t.screen().find("0 messages]"), std::string::npos);

  // Ctrl-C mid-answer stops the answer, not the program.
  t.line("/set n-predict -1");
  ASSERT_TRUE(t.wait_text("[n-predict = -1]")) << t.screen();
  t.line("And the LORD said");
  ASSERT_TRUE(t.wait_for([](const std::string& sc) {
    return trim_copy(answer_after(sc, "> And the LORD said")).size() >= 20;
  })) << t.screen();
  t.tmux({"send-keys", "-t", "chat", "C-c"});
  ASSERT_TRUE(t.wait_text("[interrupted]")) << t.screen();
  t.line("/stats");
  ASSERT_TRUE(t.wait_text("[context: ", 3)) << t.screen();
  s = t.screen();
  EXPECT_EQ(s.find("CHAT-EXIT"), std::string::npos) << s;
  EXPECT_EQ(s.find("[the context is full"), std::string::npos)
      << "the answer ended on its own: " << s;

  // /load brings back the saved conversation.
  t.line("/load " + save);
  ASSERT_TRUE(t.wait_text("[loaded 2 messages")) << t.screen();

  // /quit leaves with status 0.
  t.line("/quit");
  ASSERT_TRUE(t.wait_text("CHAT-EXIT=")) << t.screen();
  EXPECT_NE(t.screen().find("CHAT-EXIT=0"), std::string::npos) << t.screen();
}

}  // namespace
}  // namespace hearth
