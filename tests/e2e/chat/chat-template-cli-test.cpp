// `hearth chat-template` as scripts use it: exact stdout for --template, --template-name, a GGUF
// carrying tokenizer.chat_template, a Hugging Face directory, and clear one-line errors.
#include <gtest/gtest.h>

#include "formats/gguf.h"
#include "support/test-data.h"

namespace hearth {
namespace {

const char* kMessages =
    R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}])";

std::string fixture(const std::string& name) {
  return test::source_dir() + "/tests/unit/chat/fixtures/" + name + ".jinja";
}

struct Files {
  std::string dir = test::temp_dir();
  std::string messages = dir + "/msgs.json";
  Files() { test::write_file(messages, kMessages); }
};

TEST(ChatTemplateCli, TemplateFilePrintsExactlyThePrompt) {
  Files f;
  auto r = test::run_command({test::hearth_cli(), "chat-template", "--template", fixture("chatml"),
                              "--messages", f.messages, "--add-generation-prompt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(r.err, "");
}

TEST(ChatTemplateCli, BosEosAndBuiltinName) {
  Files f;
  auto r =
      test::run_command({test::hearth_cli(), "chat-template", "--template-name", "llama2",
                         "--messages", f.messages, "--bos-token", "<s>", "--eos-token", "</s>"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(
      r.out,
      "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]");
}

TEST(ChatTemplateCli, MessagesFromStdin) {
  auto r = test::run_command({test::hearth_cli(), "chat-template", "--template-name", "gemma",
                              "--messages", "-", "--bos-token", "<bos>"},
                             R"([{"role": "user", "content": " Hi "}])");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<bos><start_of_turn>user\nHi<end_of_turn>\n");
}

TEST(ChatTemplateCli, GgufTemplateAndSpecialTokens) {
  Files f;
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "tiny-test");
  w.set_string("tokenizer.chat_template",
               "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
               "{% if add_generation_prompt %}<assistant>{% endif %}{{ eos_token }}");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  const std::string path = f.dir + "/tiny.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  auto r = test::run_command({test::hearth_cli(), "chat-template", "-m", path, "--messages",
                              f.messages, "--add-generation-prompt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s><system>Be brief.<user>Hi<assistant>Hello!<user>Bye<assistant></s>");
  // --bos-token overrides the model's; --template overrides its template.
  r = test::run_command({test::hearth_cli(), "chat-template", "-m", path, "--messages", f.messages,
                         "--bos-token", "[B]", "--template", fixture("chatml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("<|im_start|>system\nBe brief.", 0), 0u) << r.out;
}

TEST(ChatTemplateCli, HfDirectoryTemplate) {
  Files f;
  const std::string dir = f.dir + "/hf";
  ASSERT_EQ(std::system(("mkdir -p '" + dir + "'").c_str()), 0);
  test::write_file(dir + "/tokenizer_config.json",
                   R"({"bos_token": "<s>", "eos_token": "</s>",
                       "chat_template": "{% for m in messages %}{{ bos_token }}{{ m.content | upper }}{{ eos_token }}{% endfor %}"})");
  auto r =
      test::run_command({test::hearth_cli(), "chat-template", "-m", dir, "--messages", f.messages});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s>BE BRIEF.</s><s>HI</s><s>HELLO!</s><s>BYE</s>");
}

TEST(ChatTemplateCli, ErrorsAreOneLine) {
  Files f;
  // A model without a template and no recognisable name: refuse, naming the fallbacks.
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "kjv-13m");
  const std::string path = f.dir + "/plain.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  auto r = test::run_command(
      {test::hearth_cli(), "chat-template", "-m", path, "--messages", f.messages});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama2"), std::string::npos) << r.err;

  // raise_exception reaches the user as one line.
  r = test::run_command({test::hearth_cli(), "chat-template", "--template", fixture("gemma"),
                         "--messages", f.messages});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("System role not supported"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  const std::string bad = f.dir + "/bad.json";
  test::write_file(bad, R"({"role": "user"})");
  r = test::run_command(
      {test::hearth_cli(), "chat-template", "--template-name", "chatml", "--messages", bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.json: expected a JSON array"), std::string::npos) << r.err;

  r = test::run_command(
      {test::hearth_cli(), "chat-template", "--template-name", "nope", "--messages", f.messages});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown template 'nope'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hearth
