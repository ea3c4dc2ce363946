// A conversation -> tokens where only the chat template's own text can produce control tokens:
// a user who types "</s>" or "<|im_end|>" gets those characters, not an end of turn. Used by
// tokenize_chat (hearth chat, run --chat) and the server. To protect another message field, add
// it where roles and contents are protected in chat-tokenize.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/chat/chat-template.h"
#include "tokenizer/special-tokens.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

class ChatTokenizer {
 public:
  // Indexes the texts this tokenizer turns into control tokens (once; ~one encode per special).
  explicit ChatTokenizer(const Tokenizer& tokenizer);

  // Renders `template_text` over the messages and tokenizes the result. With
  // content_specials false, special-token texts inside roles and string contents are plain text
  // (tokenized with the text around them); the rest tokenizes exactly as
  // encode(rendered, add_special=false, parse_special=true) does. With true, that call is all.
  // `extra` are further template variables (tools, ...).
  Result<std::vector<int32_t>> tokenize(const std::string& template_text,
                                        const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt, const std::string& bos_token,
                                        const std::string& eos_token, bool content_specials = false,
                                        const jinja::Variables& extra = {}) const;

 private:
  struct Literal {
    size_t begin, end;  // a span of the rendered text that came from a message, not the template
  };
  std::string protect(const std::string& text, std::vector<std::string>* literals) const;
  Result<std::string> restore(const std::string& rendered, const std::vector<std::string>& literals,
                              std::vector<Literal>* spans) const;
  std::vector<int32_t> encode_with_literals(const std::string& text,
                                            const std::vector<Literal>& spans) const;

  const Tokenizer& tok_;
  SpecialTokenMatcher splitters_;  // every text encode(..., parse_special=true) makes one id
  SpecialTokenMatcher controls_;   // those only parse_special recognises: kept out of messages
};

}  // namespace hearth
