// hearth_session_set_output_format: generation follows a GBNF grammar or a JSON Schema until the
// format is cleared; bad grammars are INVALID_ARGUMENT with a message and keep the old format.
#include <regex>

#include "api-test-util.h"

namespace hearth::test {
namespace {

std::string generate_text(hearth_session* s, const std::vector<int32_t>& prompt, int max_tokens,
                          int32_t* finish) {
  std::string text;
  auto cb = [](int32_t, const char* piece, size_t len, void* ud) -> int32_t {
    static_cast<std::string*>(ud)->append(piece, len);
    return 1;
  };
  hearth_generate_params gp;
  EXPECT_EQ(hearth_generate_params_init(&gp, sizeof gp), HEARTH_OK);
  gp.max_tokens = max_tokens;
  hearth_generate_result r{};
  r.struct_size = sizeof r;
  EXPECT_EQ(hearth_session_reset(s), HEARTH_OK);
  EXPECT_EQ(hearth_session_generate(s, prompt.data(), prompt.size(), &gp, cb, &text, &r), HEARTH_OK)
      << hearth_last_error();
  *finish = r.finish_reason;
  return text;
}

TEST(ApiOutputFormat, GrammarAndSchemaShapeGeneration) {
  const Golden& g = tiny_golden();
  hearth_session* s = new_session(tiny_model(), 128, 0.8f, 3);
  int32_t finish = 0;
  ASSERT_EQ(hearth_session_set_output_format(s, HEARTH_FORMAT_GBNF,
                                             "root ::= \"id-\" [0-9]{2,4} (\",\" [a-z]+)?"),
            HEARTH_OK)
      << hearth_last_error();
  for (int i = 0; i < 3; ++i) {
    const std::string text = generate_text(s, g.gen_prompt, 24, &finish);
    EXPECT_TRUE(std::regex_match(text, std::regex("id-[0-9]{2,4}(,[a-z]+)?"))) << text;
    EXPECT_EQ(finish, HEARTH_FINISH_STOP) << text;
  }
  ASSERT_EQ(hearth_session_set_output_format(s, HEARTH_FORMAT_JSON_SCHEMA,
                                             R"({"enum":["alpha","beta",{"k":[1,2]}]})"),
            HEARTH_OK)
      << hearth_last_error();
  const std::string text = generate_text(s, g.gen_prompt, 24, &finish);
  EXPECT_TRUE(text == "\"alpha\"" || text == "\"beta\"" || text == R"({"k":[1,2]})") << text;
  EXPECT_EQ(finish, HEARTH_FINISH_STOP);

  // A bad grammar keeps the schema in force.
  EXPECT_EQ(hearth_session_set_output_format(s, HEARTH_FORMAT_GBNF, "root ::= undefined-rule"),
            HEARTH_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hearth_last_error()).find("rule 'undefined-rule' is not defined"),
            std::string::npos)
      << hearth_last_error();
  EXPECT_EQ(hearth_session_set_output_format(s, HEARTH_FORMAT_JSON_SCHEMA, R"({"not":{}})"),
            HEARTH_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hearth_last_error()).find("unsupported keyword 'not'"), std::string::npos);
  EXPECT_EQ(hearth_session_set_output_format(s, 99, "x"), HEARTH_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hearth_session_set_output_format(s, HEARTH_FORMAT_GBNF, nullptr),
            HEARTH_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hearth_session_set_output_format(nullptr, HEARTH_FORMAT_TEXT, nullptr),
            HEARTH_ERR_INVALID_ARGUMENT);
  const std::string again = generate_text(s, g.gen_prompt, 24, &finish);
  EXPECT_TRUE(again == "\"alpha\"" || again == "\"beta\"" || again == R"({"k":[1,2]})") << again;

  ASSERT_EQ(hearth_session_set_output_format(s, HEARTH_FORMAT_JSON_OBJECT, nullptr), HEARTH_OK);
  const std::string obj = generate_text(s, g.gen_prompt, 40, &finish);
  ASSERT_FALSE(obj.empty());
  EXPECT_EQ(obj.front(), '{') << obj;
  EXPECT_EQ(obj.back(), '}') << obj;

  // Cleared: free text again, the full budget used with EOS ignored by this random model.
  ASSERT_EQ(hearth_session_set_output_format(s, HEARTH_FORMAT_TEXT, nullptr), HEARTH_OK);
  generate_text(s, g.gen_prompt, 8, &finish);
  EXPECT_EQ(finish, HEARTH_FINISH_LENGTH);
  hearth_session_free(s);
}

}  // namespace
}  // namespace hearth::test
