// libFuzzer entry point for the chat-template engine (also driven by replay-main.cpp in g++
// builds): the input is a template, as a GGUF's tokenizer.chat_template or a --chat-template
// file brings one. Parse and render under tight limits with a chat's usual variables; any error
// must be a one-line message, never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "fuzz-check.h"
#include "runtime/chat/jinja.h"

namespace {

using hearth::jinja::Value;

Value message(const char* role, const char* content) {
  hearth::jinja::Dict m;
  m.set("role", Value::string(role));
  m.set("content", Value::string(content));
  return Value::dict(std::move(m));
}

hearth::jinja::Variables chat_variables() {
  hearth::jinja::Dict tool;
  tool.set("name", Value::string("get_time"));
  return {
      {"messages", Value::list({message("system", "Be brief."), message("user", "Hi {{ there }}"),
                                message("assistant", "Hello.")})},
      {"tools", Value::list({Value::dict(std::move(tool))})},
      {"bos_token", Value::string("<s>")},
      {"eos_token", Value::string("</s>")},
      {"add_generation_prompt", Value::boolean(true)}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const hearth::jinja::Variables vars = chat_variables();
  hearth::jinja::Limits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1u << 16;
  limits.max_list_items = 10'000;
  limits.fixed_time = 0;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto t = hearth::jinja::Template::parse(source, limits);
  fuzz_check_error(t);
  if (!t.is_ok()) return 0;
  auto out = t->render(vars);
  fuzz_check_error(out);
  if (out.is_ok() && out->size() > limits.max_output_bytes) __builtin_trap();
  return 0;
}
