// Every GGUF pre-tokenizer name's splits against an independent regex engine (Python's `regex`,
// run by split-oracle.py) on hand-picked tricky strings and generated mixed-script text, so a
// vocabulary with a pre-tokenizer nobody tested here still splits as its tokenizer.json says.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "random-text.h"
#include "support/test-data.h"
#include "tokenizer/pre-tokenizer.h"

namespace hearth {
namespace {

using json = nlohmann::json;

// Contractions in both cases, digit runs of every length mod 3, CJK / kana / Hangul next to
// Latin, emoji with modifiers and ZWJ, combining marks, case changes, whitespace runs with and
// without newlines, the characters the BLOOM and DeepSeek classes list, chameleon's markers.
const std::vector<std::string> kTricky = {
    "Hello world",
    "I'm HE'S they'RE we'LL you'Ve it'd ſ's 'S'",
    "don't'",
    "1 12 123 1234 12345 123456 1234567",
    "3.14159 and 2,718 and ٣٤٥٦ ½²Ⅻ",
    "中文字符 日本語のテキスト カタカナ 한국어 텍스트",
    "abc中文def",
    "hi👍🏽! 👨‍👩‍👧 ok",
    "été naïve  Café",
    "CamelCaseWord HTTPServer iPhone XMLHttpRequest",
    "a  b   c    d\t\te",
    "x\r\n\r\ny \n z\n\n\n  w",
    "end  ",
    "  lead",
    "\n",
    " ",
    "\t\n \n",
    "path/to/file.txt\n//comment",
    "Hello, world! How are you? Fine… 你好，世界。",
    "a।b۔c،d",
    "(paren) [bracket] {brace} <angle> |pipe| `tick` ~tilde^ $dollar +plus =eq",
    "<sentinel:12> IMGIMGABCZ IMGIMGAAAAAZ    four  two",
    "µ À Ø ÿ Ʃ Ω K Å ﬁ Ａｂｃ ｘ",
    "ＡＢＣ！？　「引用」",
    "Ελληνικά Привет мир שלום مرحبا नमस्ते ไทย",
    "__init__ snake_case kebab-case",
    "x=1;y=22;z=333;w=4444",
    "'''quoted''' \"dq\"",
    "...!!!???",
    "tab\tsep\tvalues",
    " nbsp emsp　ideo",
    "Ŀ ǅ ǈ ʰ ˆ ⁿ",
    "‘quote’ “dq” — dash – en",
    "𐐀𐐨 𝔘𝔫𝔦 🦙🦙",
};

std::vector<std::string> corpus() {
  std::vector<std::string> texts = kTricky;
  std::mt19937_64 rng(24);
  for (int i = 0; i < 300; ++i) {
    std::string t = test::random_text(rng, /*allow_invalid=*/false);
    // Python's \s also matches U+001C..U+001F, Oniguruma's (White_Space) does not: keep them out.
    std::string clean;
    for (char ch : t) {
      if (ch < 0x1C || ch > 0x1F) clean.push_back(ch);
    }
    if (utf8::sanitize(clean) == clean) texts.push_back(clean);  // Python needs valid text
  }
  return texts;
}

TEST(PreTokenizerOracle, EveryNameSplitsAsPythonRegex) {
  const std::vector<std::string> texts = corpus();
  json req;
  req["texts"] = texts;
  std::vector<std::pair<std::string, PreTokenizer>> pipelines;
  for (std::string_view name : known_pre_tokenizer_names()) {
    auto pre = pre_tokenizer_for_gguf(name);
    ASSERT_TRUE(pre.has_value()) << name << ": a table pattern does not compile";
    req["pipelines"][std::string(name)] = pre->patterns();
    pipelines.emplace_back(std::string(name), std::move(*pre));
  }
  ASSERT_GE(pipelines.size(), 60u);
  const auto r = test::run_command(
      {"/usr/bin/python3", test::source_dir() + "/tests/unit/tokenizer/split-oracle.py"},
      req.dump());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json expected = json::parse(r.out);
  for (const auto& [name, pre] : pipelines) {
    int mismatches = 0;
    for (size_t i = 0; i < texts.size() && mismatches < 3; ++i) {
      std::vector<std::string> pieces;
      for (auto [b, e] : pre_tokenize(pre, texts[i])) pieces.push_back(texts[i].substr(b, e - b));
      const auto want = expected[name][i].get<std::vector<std::string>>();
      EXPECT_EQ(pieces, want) << name << " on \"" << texts[i] << "\"";
      mismatches += pieces != want;
    }
  }
}

}  // namespace
}  // namespace hearth
