// The published chat templates of common model families, used when a model carries none, and
// the name/marker heuristics that pick one. Add a family: a kBuiltins row plus a guess rule.
#include <algorithm>
#include <cctype>

#include "runtime/chat/chat-template.h"

namespace hearth {

namespace {

// meta-llama/Llama-2-*-chat-hf tokenizer_config.json.
constexpr std::string_view kLlama2 =
    R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";

// meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json.
constexpr std::string_view kLlama3 =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";

// The generic ChatML template from the Hugging Face chat-templating guide.
constexpr std::string_view kChatml =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

// mistralai/Mistral-7B-Instruct-v0.1 (the revision with optional system message support).
constexpr std::string_view kMistral = R"({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
)";

// google/gemma-7b-it tokenizer_config.json (no system role).
constexpr std::string_view kGemma =
    R"({{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})";

struct Builtin {
  std::string_view name;
  std::string_view text;
};
constexpr Builtin kBuiltins[] = {
    {"llama2", kLlama2},   {"llama3", kLlama3}, {"chatml", kChatml},
    {"mistral", kMistral}, {"gemma", kGemma},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool has(const std::string& s, std::string_view needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace

std::optional<std::string_view> builtin_chat_template(std::string_view name) {
  for (const auto& b : kBuiltins)
    if (b.name == name) return b.text;
  return std::nullopt;
}

std::vector<std::string_view> builtin_chat_template_names() {
  std::vector<std::string_view> names;
  for (const auto& b : kBuiltins) names.push_back(b.name);
  return names;
}

std::optional<std::string> guess_chat_template_name(std::string_view model_name,
                                                    std::string_view architecture) {
  const std::string n = lower(model_name), a = lower(architecture);
  // Most specific first: "llama-3" must not fall through to the llama2 rule.
  if (has(n, "llama-3") || has(n, "llama3") || has(n, "llama 3")) return "llama3";
  if (has(n, "llama-2") || has(n, "llama2") || has(n, "llama 2")) return "llama2";
  if (has(n, "mistral") || has(n, "mixtral") || a == "mistral") return "mistral";
  if (has(n, "gemma") || has(a, "gemma")) return "gemma";
  if (has(n, "qwen") || has(a, "qwen") || has(n, "chatml") || has(n, "hermes")) return "chatml";
  return std::nullopt;
}

std::optional<std::string> detect_chat_template_family(std::string_view text) {
  const std::string t(text);
  if (has(t, "<|im_start|>")) return "chatml";
  if (has(t, "<|start_header_id|>")) return "llama3";
  if (has(t, "<start_of_turn>")) return "gemma";
  if (has(t, "<<SYS>>")) return "llama2";
  if (has(t, "[INST]")) return "mistral";
  return std::nullopt;
}

}  // namespace hearth
