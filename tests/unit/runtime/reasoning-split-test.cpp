// ReasoningSplitter: the think block's text goes to reasoning, the rest to content, tags and the
// newlines after them to neither, whatever the pieces the text arrives in (every split point,
// every two split points, one byte at a time) and at once (split_reasoning).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/reasoning-split.h"

namespace hearth {
namespace {

struct Case {
  std::string text;
  bool starts_inside;
  std::string reasoning;
  std::string content;
  bool saw_reasoning;
};

const std::vector<Case> kCases = {
    {"<think>\nI think so.\n</think>\n\nYes.", false, "I think so.", "Yes.", true},
    {"\nplan\n</think>\n\nanswer", true, "plan", "answer", true},
    {"Hello <think> world</think>", false, "", "Hello <think> world</think>", false},
    {"  <think>r</think>c", false, "r", "c", true},
    {"<thin", false, "", "<thin", false},
    {"<think>abc</thi", false, "abc</thi", "", true},
    {"<think>a</think>b</think>c", false, "a", "b</think>c", true},
    {"<b>bold</b>", false, "", "<b>bold</b>", false},
    {"just reasoning", true, "just reasoning", "", true},
    {"<think>a\n\nb\n</think>c\n\nd", false, "a\n\nb", "c\n\nd", true},
    {"<think></think>\nonly content", false, "", "only content", true},
    {"", false, "", "", false},
    {"\n\n", false, "", "\n\n", false},
    {"<think>x</think>", false, "x", "", true},
};

// Feeds the pieces and checks the concatenated result (and that no tag leaks into a piece).
void check(const Case& c, const std::vector<std::string>& pieces, const std::string& how) {
  ReasoningSplitter s(c.starts_inside);
  ReasoningPieces all;
  for (const auto& p : pieces) {
    ReasoningPieces got = s.push(p);
    all.reasoning += got.reasoning;
    all.content += got.content;
  }
  ReasoningPieces tail = s.flush();
  all.reasoning += tail.reasoning;
  all.content += tail.content;
  EXPECT_EQ(all.reasoning, c.reasoning) << "text " << testing::PrintToString(c.text) << " " << how;
  EXPECT_EQ(all.content, c.content) << "text " << testing::PrintToString(c.text) << " " << how;
  EXPECT_EQ(s.saw_reasoning(), c.saw_reasoning) << testing::PrintToString(c.text) << " " << how;
}

TEST(ReasoningSplit, WholeText) {
  for (const auto& c : kCases) {
    ReasoningPieces got = split_reasoning(c.text, c.starts_inside);
    EXPECT_EQ(got.reasoning, c.reasoning) << testing::PrintToString(c.text);
    EXPECT_EQ(got.content, c.content) << testing::PrintToString(c.text);
  }
}

TEST(ReasoningSplit, EveryOneAndTwoSplitPoints) {
  for (const auto& c : kCases) {
    const size_t n = c.text.size();
    for (size_t i = 0; i <= n; ++i) {
      for (size_t j = i; j <= n; ++j) {
        check(c, {c.text.substr(0, i), c.text.substr(i, j - i), c.text.substr(j)},
              "split at " + std::to_string(i) + "," + std::to_string(j));
      }
    }
  }
}

TEST(ReasoningSplit, OneByteAtATime) {
  for (const auto& c : kCases) {
    std::vector<std::string> bytes;
    for (char ch : c.text) bytes.emplace_back(1, ch);
    check(c, bytes, "byte by byte");
  }
}

// Streamed pieces show the reasoning as it comes, not only at the closing tag.
TEST(ReasoningSplit, EmitsReasoningBeforeTheBlockCloses) {
  ReasoningSplitter s;
  EXPECT_EQ(s.push("<think>\nfirst ").reasoning, "first ");
  ReasoningPieces p = s.push("second\n</th");
  EXPECT_EQ(p.reasoning, "second");
  EXPECT_EQ(p.content, "");
  p = s.push("ink>\n\nanswer");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "answer");
}

TEST(ReasoningSplit, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<think>"));
  EXPECT_TRUE(prompt_opens_reasoning("x<think> \n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning("think>"));
  EXPECT_FALSE(prompt_opens_reasoning(""));
}

}  // namespace
}  // namespace hearth
