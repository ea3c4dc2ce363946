// Reasoning over streamed text: models such as DeepSeek-R1 distills and Qwen3 write
// "<think>reasoning</think>answer". The splitter sends the text inside the think block to
// `reasoning` and the rest to `content`; the tags and the newlines right after them never reach
// either. A tag split across pushes is held back until it is whole, as StopStringFilter does.
// Only a think block at the start of the output (after whitespace) counts: a "<think>" in the
// middle of an answer is answer text. Templates that put the opening "<think>" in the prompt make
// the output start inside the block (prompt_opens_reasoning() says when).
#pragma once

#include <string>
#include <string_view>

namespace hearth {

struct ReasoningPieces {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  // starts_inside: the output begins in the reasoning (the prompt ended with "<think>").
  explicit ReasoningSplitter(bool starts_inside = false);
  // Feeds new text; returns what can be shown now.
  ReasoningPieces push(std::string_view text);
  // End of stream: whatever is still held back (a partial tag is text after all).
  ReasoningPieces flush();
  // push(text), and when `last` the flush() after it: a streamed response's every piece.
  ReasoningPieces take(std::string_view text, bool last);
  // Whether a think block was opened (by a tag or by starts_inside).
  bool saw_reasoning() const { return saw_reasoning_; }

 private:
  enum class State { kStart, kReasoning, kContent };
  void take_start(ReasoningPieces* out);
  void take_reasoning(ReasoningPieces* out);
  State state_;
  std::string held_;            // text not yet assigned
  bool skip_newlines_ = false;  // drop newlines at the start of the next piece (after a tag)
  bool saw_reasoning_ = false;
};

// The whole text at once (non-streamed responses).
ReasoningPieces split_reasoning(std::string_view text, bool starts_inside);

// Whether a rendered prompt (or its tail) ends with "<think>" and optional whitespace, so that the
// model's output starts inside the reasoning.
bool prompt_opens_reasoning(std::string_view prompt_tail);

}  // namespace hearth
