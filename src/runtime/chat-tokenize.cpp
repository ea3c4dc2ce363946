// ChatTokenizer. Each special-token text found in a message (and any U+E000 already there) is
// swapped for a placeholder, U+E000 <index> U+E001, before rendering: templates that trim or
// change the case of contents leave it intact, and the template's own special tokens cannot form
// across it. After rendering the placeholders are put back and their spans recorded; a special
// text is a control token only where it overlaps no such span.
#include "runtime/chat-tokenize.h"

#include <algorithm>

namespace hearth {

namespace {
constexpr std::string_view kOpen = "\xEE\x80\x80";   // U+E000 (private use)
constexpr std::string_view kClose = "\xEE\x80\x81";  // U+E001
}  // namespace

ChatTokenizer::ChatTokenizer(const Tokenizer& tokenizer) : tok_(tokenizer) {
  for (int32_t id = 0; id < tok_.n_vocab(); ++id) {
    const TokenType t = tok_.token_type(id);
    if (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown)
      continue;
    const std::string text = tok_.token_text(id);
    if (text.empty()) continue;
    // Derived from the tokenizer's own behaviour, so the sets match every tokenizer kind: a
    // text its parse_special path makes this one id splits the text as that path does; one
    // that only that path recognises (control, not user-defined) is what messages must not
    // produce.
    const std::vector<int32_t> one{id};
    if (tok_.encode(text, false, true) != one) continue;
    splitters_.add(text, id);
    if (tok_.encode(text, false, false) != one) controls_.add(text, id);
  }
}

std::string ChatTokenizer::protect(const std::string& text,
                                   std::vector<std::string>* literals) const {
  std::string out;
  out.reserve(text.size());
  auto placeholder = [&](std::string literal) {
    out += kOpen;
    out += std::to_string(literals->size());
    out += kClose;
    literals->push_back(std::move(literal));
  };
  for (size_t pos = 0; pos < text.size();) {
    if (std::string_view(text).substr(pos).starts_with(kOpen)) {
      placeholder(std::string(kOpen));
      pos += kOpen.size();
      continue;
    }
    const auto [id, len] =
        controls_.empty() ? std::pair<int32_t, size_t>{-1, 0} : controls_.match_at(text, pos);
    if (id >= 0) {
      placeholder(text.substr(pos, len));
      pos += len;
      continue;
    }
    out += text[pos++];
  }
  return out;
}

Result<std::string> ChatTokenizer::restore(const std::string& rendered,
                                           const std::vector<std::string>& literals,
                                           std::vector<Literal>* spans) const {
  std::string out;
  out.reserve(rendered.size());
  const std::string_view r = rendered;
  for (size_t pos = 0; pos < r.size();) {
    if (!r.substr(pos).starts_with(kOpen)) {
      out += r[pos++];
      continue;
    }
    size_t p = pos + kOpen.size(), index = 0, digits = 0;
    while (p < r.size() && r[p] >= '0' && r[p] <= '9' && digits < 9) {
      index = index * 10 + size_t(r[p++] - '0');
      ++digits;
    }
    if (digits == 0 || !r.substr(p).starts_with(kClose) || index >= literals.size())
      return Status::error(
          "the chat template changed a message's special-token text in a way that cannot be "
          "traced (U+E000 in the template?); use --special-tokens-in-content for this template");
    spans->push_back({out.size(), out.size() + literals[index].size()});
    out += literals[index];
    pos = p + kClose.size();
  }
  return out;
}

std::vector<int32_t> ChatTokenizer::encode_with_literals(const std::string& text,
                                                         const std::vector<Literal>& spans) const {
  std::vector<int32_t> out;
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    const auto ids = tok_.encode(run, /*add_special=*/false, /*parse_special=*/false);
    out.insert(out.end(), ids.begin(), ids.end());
    run.clear();
  };
  size_t next = 0;  // the first span that ends after pos
  for (size_t pos = 0; pos < text.size();) {
    while (next < spans.size() && spans[next].end <= pos) ++next;
    if (next < spans.size() && spans[next].begin <= pos) {
      run.append(text, pos, spans[next].end - pos);  // message text stays text
      pos = spans[next].end;
      continue;
    }
    const auto [id, len] = splitters_.match_at(text, pos);
    const size_t limit = next < spans.size() ? spans[next].begin : text.size();
    if (id >= 0 && pos + len <= limit) {
      flush();
      out.push_back(id);
      pos += len;
      continue;
    }
    run += text[pos++];
  }
  flush();
  return out;
}

Result<std::vector<int32_t>> ChatTokenizer::tokenize(
    const std::string& template_text, const std::vector<ChatMessage>& messages,
    bool add_generation_prompt, const std::string& bos_token, const std::string& eos_token,
    bool content_specials, const jinja::Variables& extra) const {
  if (content_specials) {
    HEARTH_ASSIGN_OR_RETURN(std::string text,
                            render_chat_template(template_text, messages, add_generation_prompt,
                                                 bos_token, eos_token, extra));
    return tok_.encode(text, /*add_special=*/false, /*parse_special=*/true);
  }
  std::vector<std::string> literals;
  std::vector<ChatMessage> protected_messages = messages;
  for (auto& m : protected_messages) {
    m.role = protect(m.role, &literals);
    m.content = protect(m.content, &literals);
  }
  HEARTH_ASSIGN_OR_RETURN(std::string rendered,
                          render_chat_template(template_text, protected_messages,
                                               add_generation_prompt, bos_token, eos_token, extra));
  std::vector<Literal> spans;
  HEARTH_ASSIGN_OR_RETURN(std::string text, restore(rendered, literals, &spans));
  return encode_with_literals(text, spans);
}

}  // namespace hearth
