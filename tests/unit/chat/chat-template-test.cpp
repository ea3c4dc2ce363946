// The published chat templates (fixtures/*.jinja) rendered over multi-turn conversations with
// and without a system prompt; expected strings are derived by hand from each template's text.
#include <gtest/gtest.h>

#include "runtime/chat/chat-template.h"
#include "support/test-data.h"

namespace hearth {
namespace {

std::string fixture(const std::string& name) {
  return test::read_file(test::source_dir() + "/tests/unit/chat/fixtures/" + name + ".jinja");
}

std::vector<ChatMessage> conversation(bool with_system) {
  std::vector<ChatMessage> m;
  if (with_system) m.push_back({"system", "You are terse.", {}});
  m.push_back({"user", "Hello", {}});
  m.push_back({"assistant", "Hi there!", {}});
  m.push_back({"user", "How are you?", {}});
  return m;
}

std::string render_ok(const std::string& name, bool with_system, bool add_generation_prompt,
                      const std::string& bos, const std::string& eos) {
  const std::string tmpl = fixture(name);
  EXPECT_FALSE(tmpl.empty()) << "missing fixture " << name;
  auto r = render_chat_template(tmpl, conversation(with_system), add_generation_prompt, bos, eos);
  EXPECT_TRUE(r.is_ok()) << name << ": " << r.message();
  return r.is_ok() ? r.value() : "";
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(render_ok("llama2", false, true, "<s>", "</s>"),
            "<s>[INST] Hello [/INST] Hi there! </s><s>[INST] How are you? [/INST]");
  EXPECT_EQ(render_ok("llama2", true, false, "<s>", "</s>"),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello [/INST] Hi there! </s>"
            "<s>[INST] How are you? [/INST]");
  // content.strip() trims each turn.
  auto r =
      render_chat_template(fixture("llama2"), {{"user", "  padded \n", {}}}, false, "<s>", "</s>");
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "<s>[INST] padded [/INST]");
}

TEST(ChatTemplate, Llama3) {
  const std::string turns =
      "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHi there!<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>";
  const std::string prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(render_ok("llama3", false, true, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|>" + turns + prompt);
  EXPECT_EQ(
      render_ok("llama3", true, false, "<|begin_of_text|>", "<|eot_id|>"),
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
          turns);
  // `message['content'] | trim` trims the content only (filters bind tighter than +).
  auto r = render_chat_template(fixture("llama3"), {{"user", "\n hi \n", {}}}, false, "B", "E");
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "B<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
}

TEST(ChatTemplate, Chatml) {
  const std::string turns =
      "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there!<|im_end|>\n"
      "<|im_start|>user\nHow are you?<|im_end|>\n";
  EXPECT_EQ(render_ok("chatml", false, false, "", ""), turns);
  EXPECT_EQ(render_ok("chatml", true, true, "", ""),
            "<|im_start|>system\nYou are terse.<|im_end|>\n" + turns + "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen2AddsDefaultSystemPrompt) {
  const std::string turns =
      "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there!<|im_end|>\n"
      "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(render_ok("qwen2", false, true, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" + turns);
  EXPECT_EQ(render_ok("qwen2", true, true, "", "<|im_end|>"),
            "<|im_start|>system\nYou are terse.<|im_end|>\n" + turns);
}

TEST(ChatTemplate, Mistral) {
  EXPECT_EQ(render_ok("mistral", false, true, "<s>", "</s>"),
            "<s> [INST] Hello [/INST] Hi there!</s> [INST] How are you? [/INST]");
  EXPECT_EQ(render_ok("mistral", true, true, "<s>", "</s>"),
            "<s> [INST] You are terse.\n\nHello [/INST] Hi there!</s> [INST] How are you? [/INST]");
  auto r = render_chat_template(fixture("mistral"), {{"user", "a", {}}, {"user", "b", {}}}, false,
                                "<s>", "</s>");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("conversation roles must alternate"), std::string::npos)
      << r.message();
}

TEST(ChatTemplate, Gemma) {
  EXPECT_EQ(
      render_ok("gemma", false, true, "<bos>", "<eos>"),
      "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there!"
      "<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render_ok("gemma", false, false, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there!"
            "<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n");
  // Gemma's template rejects a system message: that is what it defines.
  auto r = render_chat_template(fixture("gemma"), conversation(true), true, "<bos>", "<eos>");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("System role not supported"), std::string::npos) << r.message();
}

TEST(ChatTemplate, Llama2RejectsNonAlternatingRoles) {
  auto r = render_chat_template(fixture("llama2"), {{"assistant", "x", {}}}, false, "<s>", "</s>");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("Conversation roles must alternate"), std::string::npos);
}

TEST(ChatTemplate, BuiltinsMatchFixtures) {
  for (auto name : builtin_chat_template_names()) {
    auto text = builtin_chat_template(name);
    ASSERT_TRUE(text.has_value()) << name;
    std::string t(*text);
    if (t.empty() || t.back() != '\n') t += '\n';
    EXPECT_EQ(t, fixture(std::string(name))) << name;
  }
  EXPECT_EQ(builtin_chat_template_names().size(), 5u);
  EXPECT_FALSE(builtin_chat_template("nope").has_value());
}

TEST(ChatTemplate, GuessAndDetectFamily) {
  EXPECT_EQ(guess_chat_template_name("Meta-Llama-3.1-8B-Instruct", "llama"), "llama3");
  EXPECT_EQ(guess_chat_template_name("Llama-2-7b-chat-hf", "llama"), "llama2");
  EXPECT_EQ(guess_chat_template_name("Mistral-7B-Instruct-v0.1", "llama"), "mistral");
  EXPECT_EQ(guess_chat_template_name("gemma-2b-it", "gemma"), "gemma");
  EXPECT_EQ(guess_chat_template_name("Qwen2-0.5B-Instruct", "qwen2"), "chatml");
  EXPECT_FALSE(guess_chat_template_name("kjv-13m", "llama").has_value());
  for (auto name : builtin_chat_template_names())
    EXPECT_EQ(detect_chat_template_family(*builtin_chat_template(name)), std::string(name));
  EXPECT_FALSE(detect_chat_template_family("{{ messages }}").has_value());
}

TEST(ChatTemplate, ExtraVariablesAndFields) {
  ChatMessage m{"user", "hi", {{"name", jinja::Value::string("bob")}}};
  auto tools = json_to_value(R"([{"name": "get_time", "parameters": {}}])", "tools");
  ASSERT_TRUE(tools.is_ok()) << tools.message();
  auto r = render_chat_template(
      "{{ messages[0].name }}:{{ messages[0].content }}|{{ tools | tojson }}|{{ date }}", {m},
      false, "", "", {{"tools", tools.value()}, {"date", jinja::Value::string("today")}});
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "bob:hi|[{\"name\": \"get_time\", \"parameters\": {}}]|today");
}

TEST(ChatMessagesJson, ParsesAndRoundTrips) {
  auto m = parse_chat_messages_json(
      R"([{"role": "system", "content": "S"}, {"role": "user", "content": "caf\u00e9", "name": "x"},
          {"role": "assistant", "content": null}])",
      "msgs.json");
  ASSERT_TRUE(m.is_ok()) << m.message();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[1].content, "caf\xc3\xa9");
  ASSERT_EQ((*m)[1].fields.size(), 1u);
  EXPECT_EQ((*m)[1].fields[0].first, "name");
  // A null content is kept as a field, so templates see `content is none`.
  auto r = render_chat_template("{{ messages[2].content is none }}", m.value(), false, "", "");
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), "True");
  auto text = chat_messages_to_json(m.value());
  ASSERT_TRUE(text.is_ok());
  auto again = parse_chat_messages_json(text.value(), "saved.json");
  ASSERT_TRUE(again.is_ok()) << again.message();
  EXPECT_EQ(again->size(), 3u);
  EXPECT_EQ((*again)[1].content, "caf\xc3\xa9");
}

TEST(ChatMessagesJson, RejectsBadShapes) {
  EXPECT_NE(parse_chat_messages_json("{}", "m.json").message().find("array"), std::string::npos);
  EXPECT_NE(parse_chat_messages_json("[{\"content\": \"x\"}]", "m.json").message().find("role"),
            std::string::npos);
  EXPECT_NE(parse_chat_messages_json("[1]", "m.json").message().find("message 0"),
            std::string::npos);
  EXPECT_NE(parse_chat_messages_json("[", "m.json").message().find("not valid JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace hearth
