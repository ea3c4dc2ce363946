// How a conversation becomes tokens for one engine: which chat template (the model's own, a file,
// or a named built-in fallback), the end-of-turn stop strings of that template family, and the
// rendering + tokenization. Shared by `hearth chat`, `hearth run --chat`, the server and the C API.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/chat-tokenize.h"
#include "runtime/chat/chat-template.h"
#include "runtime/engine.h"

namespace hearth {

struct ChatFormat {
  std::string template_text;
  std::string label;               // "from the model", "built-in llama2 (...)", a file path
  std::vector<std::string> stops;  // end-of-turn texts the model may print as plain text
  // The engine's special-token index (resolve_chat_format builds it; null: built per call).
  std::shared_ptr<const ChatTokenizer> tokenizer;
};

// template_file wins, then builtin_name, then the model's template, then a guessed built-in
// (falling back to llama2, said in the label).
Result<ChatFormat> resolve_chat_format(const Engine& engine, const std::string& template_file = "",
                                       const std::string& builtin_name = "");

// Renders the messages (with the generation prompt) and tokenizes the result. The template
// writes BOS itself, so nothing is added; special-token texts become control tokens only in the
// template's own text, unless content_specials (then also in roles and contents).
Result<std::vector<int32_t>> tokenize_chat(const Engine& engine, const ChatFormat& format,
                                           const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt = true,
                                           bool content_specials = false);

}  // namespace hearth
