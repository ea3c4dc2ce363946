// Chat templates: renders a model's Jinja chat template over a conversation the way Hugging Face
// does, plus built-in fallbacks (llama2, llama3, chatml, mistral, gemma) for models without one.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "runtime/chat/jinja.h"

namespace hearth {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
  // Further fields a template may read (name, tool_calls, ...). A "content" entry here replaces
  // the string above (structured content parts).
  std::vector<std::pair<std::string, jinja::Value>> fields;
};

// Renders `tmpl` with Hugging Face's variables: messages, add_generation_prompt, bos_token,
// eos_token, plus `extra` (tools, date_string, ...). A template error or raise_exception() is
// an error naming the template line.
Result<std::string> render_chat_template(const std::string& tmpl,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt, const std::string& bos_token,
                                         const std::string& eos_token,
                                         const jinja::Variables& extra = {},
                                         const jinja::Limits& limits = {});

// The published template text of a known family, or nullopt for an unknown name.
std::optional<std::string_view> builtin_chat_template(std::string_view name);
std::vector<std::string_view> builtin_chat_template_names();
// Picks a fallback family from a model's name and architecture ("Llama-2-7b-chat", "qwen2"),
// or nullopt when nothing matches (callers should then ask the user, never guess silently).
std::optional<std::string> guess_chat_template_name(std::string_view model_name,
                                                    std::string_view architecture);
// Recognises which known family a template text belongs to by its markers ("<|im_start|>"
// -> chatml); nullopt when none match. Used to pick stop strings.
std::optional<std::string> detect_chat_template_family(std::string_view template_text);

// Messages as JSON: [{"role": ..., "content": ...}, ...]. Other keys become `fields`.
Result<std::vector<ChatMessage>> parse_chat_messages_json(const std::string& text,
                                                          const std::string& source);
// The inverse (for /save): a JSON array with role, content and fields.
Result<std::string> chat_messages_to_json(const std::vector<ChatMessage>& messages);
// Any JSON document as a template value (for extra variables such as tools).
Result<jinja::Value> json_to_value(const std::string& text, const std::string& source);

}  // namespace hearth
