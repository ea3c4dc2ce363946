// Pre-tokenizer splits written by hand from the published regexes (GPT-2, Llama 3, Qwen2):
// contractions, digit grouping, whitespace runs, newlines, CJK, emoji, invalid UTF-8.
#include <gtest/gtest.h>

#include "tokenizer/pre-tokenizer.h"

namespace hearth {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(PreTokenizer pre, std::string_view text) {
  Pieces out;
  for (auto [b, e] : pre_tokenize(pre, text)) out.emplace_back(text.substr(b, e - b));
  return out;
}

PreTokenizer named(std::string_view name) {
  auto p = pre_tokenizer_for_gguf(name);
  EXPECT_TRUE(p.has_value()) << name;
  return p.value_or(PreTokenizer{});
}

const PreTokenizer kGpt2 = named("gpt-2");
const PreTokenizer kLlama3 = named("llama-bpe");
const PreTokenizer kQwen2 = named("qwen2");

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split(kLlama3, "the 12345 he's\n\n  x"),
            (Pieces{"the", " ", "123", "45", " he", "'s", "\n\n", " ", " x"}));
  EXPECT_EQ(split(kLlama3, "I'M we'RE they'll don't"),
            (Pieces{"I", "'M", " we", "'RE", " they", "'ll", " don", "'t"}));
  EXPECT_EQ(split(kLlama3, "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split(kLlama3, "a  b   c"), (Pieces{"a", " ", " b", "  ", " c"}));
  EXPECT_EQ(split(kLlama3, "x\r\n\r\ny \n z"), (Pieces{"x", "\r\n\r\n", "y", " \n", " z"}));
  EXPECT_EQ(split(kLlama3, "end  "), (Pieces{"end", "  "}));
  EXPECT_EQ(split(kLlama3, "中文字符 日本"), (Pieces{"中文字符", " 日本"}));
  EXPECT_EQ(split(kLlama3, "hi👍🏽! ok"), (Pieces{"hi", "👍🏽!", " ok"}));
  EXPECT_EQ(split(kLlama3, "!!ab ,x.\n\ny"), (Pieces{"!!", "ab", " ,", "x", ".\n\n", "y"}));
  EXPECT_EQ(split(kLlama3,
                  "\xFF\xFE"
                  "ab\xC3"),
            (Pieces{"\xFF\xFE", "ab", "\xC3"}));
  EXPECT_EQ(split(kLlama3,
                  "\xFF"
                  "ab"),
            (Pieces{"\xFF"
                    "ab"}));
  EXPECT_EQ(split(kLlama3, "½²Ⅻ٣4"), (Pieces{"½²Ⅻ", "٣4"}));
  EXPECT_EQ(split(kLlama3, "\tword"), (Pieces{"\tword"}));
  EXPECT_EQ(split(kLlama3, "it'sx 's"), (Pieces{"it", "'s", "x", " '", "s"}));
}

TEST(PreTokenizer, Qwen2DigitsOneByOne) {
  EXPECT_EQ(split(kQwen2, "the 12345 he's\n\n  x"),
            (Pieces{"the", " ", "1", "2", "3", "4", "5", " he", "'s", "\n\n", " ", " x"}));
  EXPECT_EQ(split(kQwen2, "Q'S 中文 3.14"), (Pieces{"Q", "'S", " 中文", " ", "3", ".", "1", "4"}));
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split(kGpt2, "the 12345 he's\n\n  x"),
            (Pieces{"the", " 12345", " he", "'s", "\n\n ", " x"}));
  // Contractions are case-sensitive in GPT-2's pattern.
  EXPECT_EQ(split(kGpt2, "I'M don't"), (Pieces{"I", "'", "M", " don", "'t"}));
  EXPECT_EQ(split(kGpt2, "a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(split(kGpt2, " !?x"), (Pieces{" !?", "x"}));
  EXPECT_EQ(split(kGpt2, "中文 😀😀"), (Pieces{"中文", " 😀😀"}));
}

TEST(PreTokenizer, DigitsThenGpt2AsStarCoder) {
  EXPECT_EQ(split(named("starcoder"), "a 123b"), (Pieces{"a", " ", "1", "2", "3", "b"}));
}

// Hand-checked splits of the other published pipelines (the oracle test checks many more
// strings against Python's regex engine).
TEST(PreTokenizer, DeepSeekCoder) {
  // Newlines alone, letters with one leading space, punctuation (P, so not "=", a symbol)
  // runs, CJK runs cut out of " 中文", digits alone; the rest stays as gaps.
  EXPECT_EQ(split(named("deepseek-coder"), "int x = 42;\n// 中文"),
            (Pieces{"int", " x", " = ", "4", "2", ";", "\n", "//", " ", "中文"}));
}

TEST(PreTokenizer, Gpt4oSplitsCaseChanges) {
  EXPECT_EQ(split(named("gpt-4o"), "CamelCase HTTPServer it's 12345"),
            (Pieces{"Camel", "Case", " HTTPServer", " it's", " ", "123", "45"}));
  EXPECT_EQ(split(named("tekken"), "CamelCase it's 12"),
            (Pieces{"Camel", "Case", " it", "'s", " ", "1", "2"}));
}

TEST(PreTokenizer, SuperBpeGroupsDigitsFromTheRight) {
  EXPECT_EQ(split(named("superbpe"), "x1234567 12"), (Pieces{"x", "1", "234", "567", " ", "12"}));
}

TEST(PreTokenizer, BloomSplitsAtSentenceMarks) {
  // "(", "|" and ")" are in the excluded class too; excluded runs stay one gap piece.
  EXPECT_EQ(split(named("bloom"), "Hi, you (x|y).\n"),
            (Pieces{"Hi", ",", " you", " (", "x", "|", "y", ").\n"}));
}

TEST(PreTokenizer, FalconAndDefault) {
  // ASCII symbols split first, then GPT-2, then runs of three ASCII digits.
  EXPECT_EQ(split(named("falcon"), "a+b 1234"), (Pieces{"a", "+", "b", " ", "123", "4"}));
  EXPECT_EQ(split(named("default"), "a+b 1234"), (Pieces{"a", "+", "b", " ", "123", "4"}));
}

TEST(PreTokenizer, DeepSeekV3) {
  // Digits by three first; kanji and katakana share one class; " ." is a punctuation piece
  // (a space is not in the first alternative's ASCII list).
  EXPECT_EQ(split(named("deepseek-v3"), "1234 .NET 日本語テキスト"),
            (Pieces{"123", "4", " .", "NET", " ", "日本語テキスト"}));
  EXPECT_EQ(split(named("deepseek-v3"), "x.NET"), (Pieces{"x", ".NET"}));
}

TEST(PreTokenizer, PiecesAlwaysCoverInput) {
  const std::string s = "x \xF0\x9F\x98 \xED\xA0\x80 y\n\t\v\f\xC2\xA0z";
  for (const auto& p : {kGpt2, kLlama3, kQwen2}) {
    std::string joined;
    for (const auto& piece : split(p, s)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, s);
  }
}

TEST(PreTokenizer, Lookups) {
  EXPECT_EQ(pre_tokenizer_for_gguf("llama-bpe"), kLlama3);
  EXPECT_EQ(pre_tokenizer_for_gguf("qwen2"), kQwen2);
  EXPECT_EQ(pre_tokenizer_for_gguf("gpt-2"), kGpt2);
  EXPECT_FALSE(pre_tokenizer_for_gguf("no-such-pre").has_value());
  // Any Split regex now compiles; a malformed one is an error naming the pattern.
  auto bad = SplitRegex::compile("(\\w+");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("(\\w+"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace hearth
