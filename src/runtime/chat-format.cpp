// resolve_chat_format / tokenize_chat.
#include "runtime/chat-format.h"

#include "base/mapped-file.h"

namespace hearth {

Result<ChatFormat> resolve_chat_format(const Engine& engine, const std::string& template_file,
                                       const std::string& builtin_name) {
  ChatFormat f;
  if (!template_file.empty()) {
    HEARTH_ASSIGN_OR_RETURN(f.template_text, read_text_file(template_file));
    f.label = template_file;
  } else if (!builtin_name.empty()) {
    auto b = builtin_chat_template(builtin_name);
    if (!b) {
      std::string names;
      for (auto n : builtin_chat_template_names())
        names += (names.empty() ? "" : ", ") + std::string(n);
      return Status::error("unknown chat template '" + builtin_name + "' (known: " + names + ")");
    }
    f.template_text = std::string(*b);
    f.label = "built-in " + builtin_name;
  } else if (!engine.chat_template().empty()) {
    f.template_text = engine.chat_template();
    f.label = "from the model";
  } else {
    const std::string name =
        guess_chat_template_name(engine.name(), engine.model().arch().gguf_name).value_or("llama2");
    f.template_text = std::string(*builtin_chat_template(name));
    f.label = "built-in " + name + " (the model has none; choose with --template-name)";
  }
  const auto family = detect_chat_template_family(f.template_text);
  if (family == "chatml") f.stops = {"<|im_end|>", "<|im_start|>"};
  if (family == "llama3") f.stops = {"<|eot_id|>", "<|start_header_id|>"};
  if (family == "gemma") f.stops = {"<end_of_turn>", "<start_of_turn>"};
  if (family == "llama2" || family == "mistral") f.stops = {"</s>", "[INST]"};
  if (!engine.eos_text().empty()) f.stops.push_back(engine.eos_text());
  f.tokenizer = std::make_shared<const ChatTokenizer>(engine.tokenizer());
  return f;
}

Result<std::vector<int32_t>> tokenize_chat(const Engine& engine, const ChatFormat& format,
                                           const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt, bool content_specials) {
  std::shared_ptr<const ChatTokenizer> tok = format.tokenizer;
  if (!tok) tok = std::make_shared<const ChatTokenizer>(engine.tokenizer());
  return tok->tokenize(format.template_text, messages, add_generation_prompt, engine.bos_text(),
                       engine.eos_text(), content_specials);
}

}  // namespace hearth
