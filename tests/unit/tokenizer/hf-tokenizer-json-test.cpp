// tokenizer.json from a model directory is the model author's: fields of the wrong type and
// endlessly nested Sequences are errors naming the file, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/hf-tokenizer-json.h"

namespace hearth {
namespace {

std::string with_pre(const std::string& pre) {
  return R"({"pre_tokenizer":)" + pre +
         R"(,"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})";
}

TEST(HfTokenizerJson, FieldsOfTheWrongTypeAreErrors) {
  const std::string model =
      R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"])";
  for (const std::string text :
       {with_pre(R"({"type":"Split","pattern":{"Regex":"a"},"invert":"BPE"})"),
        with_pre(R"({"type":"Split","pattern":{"Regex":"a"},"behavior":7})"),
        "{" + model + R"(,"byte_fallback":"yes"}})", "{" + model + R"(,"ignore_merges":[]}})"}) {
    auto r = parse_hf_tokenizer_json(text, "tokenizer.json");
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.message().rfind("tokenizer.json: ", 0), 0u) << r.message();
    EXPECT_EQ(r.message().find('\n'), std::string::npos) << r.message();
  }
  EXPECT_TRUE(parse_hf_tokenizer_json(with_pre("null"), "tokenizer.json").is_ok());
}

TEST(HfTokenizerJson, DeepSequencesAreAnError) {
  std::string pre = R"({"type":"ByteLevel"})";
  for (int i = 0; i < 3000; ++i) pre = R"({"type":"Sequence","pretokenizers":[)" + pre + "]}";
  auto r = parse_hf_tokenizer_json(with_pre(pre), "tokenizer.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("nested too deep"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace hearth
