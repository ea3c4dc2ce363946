// The pre-tokenizer regex engine's constructs one by one (match lengths in code points at a
// position), and its errors for what it does not support.
#include <gtest/gtest.h>

#include "tokenizer/split-regex.h"

namespace hearth {
namespace {

int64_t match(std::string_view pattern, std::string_view text, size_t pos = 0) {
  auto re = SplitRegex::compile(pattern);
  EXPECT_TRUE(re.is_ok()) << re.message();
  if (!re.is_ok()) return -2;
  return re.value().match_at(CodePoints::from_utf8(text), pos);
}

TEST(SplitRegex, LeftmostAlternativeWinsNotLongest) {
  EXPECT_EQ(match("a|ab", "ab"), 1);
  EXPECT_EQ(match("ab|a", "ab"), 2);
  EXPECT_EQ(match("x", "ab"), -1);
}

TEST(SplitRegex, GreedyLazyPossessive) {
  EXPECT_EQ(match("a+", "aaab"), 3);
  EXPECT_EQ(match("a+?", "aaab"), 1);
  EXPECT_EQ(match("a*ab", "aaab"), 4);    // greedy gives one back
  EXPECT_EQ(match("a*+ab", "aaab"), -1);  // possessive does not
  EXPECT_EQ(match("(?>a*)ab", "aaab"), -1);
  EXPECT_EQ(match("a{2,3}", "aaaa"), 3);
  EXPECT_EQ(match("a{2}", "a"), -1);
  EXPECT_EQ(match("a{2,}", "aaaaa"), 5);
  EXPECT_EQ(match("a{,2}", "aaa"), 2);
  EXPECT_EQ(match("a{x}", "a{x}"), 4);  // not a quantifier: literal braces
}

TEST(SplitRegex, ClassesAndProperties) {
  EXPECT_EQ(match(R"(\p{L}+)", "héllo中文 x"), 7);
  EXPECT_EQ(match(R"(\p{Lu}\p{Ll}+)", "Camel"), 5);
  EXPECT_EQ(match(R"(\p{N}+)", "½²Ⅻ٣4x"), 5);
  EXPECT_EQ(match(R"(\p{Han}+)", "中文かな"), 2);
  EXPECT_EQ(match(R"([^\s\p{L}]+)", "!?1 a"), 3);
  EXPECT_EQ(match(R"([\p{P}\$]+)", "$.,+"), 3);  // '+' is a symbol, not punctuation
  EXPECT_EQ(match(R"([a\-z]+)", "a-zb"), 3);
  EXPECT_EQ(match(R"([一-龥]+)", "中文x"), 2);
  EXPECT_EQ(match(R"(\u4e2d\x{6587})", "中文"), 2);
  EXPECT_EQ(match(R"(\s+)", "\t\n \u3000\u00a0x"), 5);
  EXPECT_EQ(match(R"(\d+)", "12٣x"), 3);
  EXPECT_EQ(match(R"(.+)", "ab\ncd"), 2);
}

TEST(SplitRegex, CaseInsensitiveGroups) {
  EXPECT_EQ(match(R"((?i:'s|'re))", "'RE"), 3);
  EXPECT_EQ(match(R"((?i:'s))", "'ſ"), 2);   // LATIN SMALL LETTER LONG S folds to s
  EXPECT_EQ(match(R"((?i:a)b)", "AB"), -1);  // the flag ends with its group
  EXPECT_EQ(match(R"(x(?i)ab)", "xAB"), 3);
}

TEST(SplitRegex, Assertions) {
  EXPECT_EQ(match(R"(\s+(?!\S))", "   x"), 2);
  EXPECT_EQ(match(R"(a(?=b))", "ab"), 1);
  EXPECT_EQ(match(R"(a(?=b))", "ac"), -1);
  EXPECT_EQ(match(R"(\s+$)", "  \nx"), 2);  // $ is a line end, as in Ruby
  EXPECT_EQ(match(R"(^b)", "a\nb", 2), 1);
  EXPECT_EQ(match(R"(\d{1,3}(?=(?:\d{3})*\b))", "12345 "), 2);
  EXPECT_EQ(match(R"(\bx)", "ax", 1), -1);
}

TEST(SplitRegex, UnsupportedIsAnErrorNamingIt) {
  for (const char* bad : {"(?<=a)b", R"((a)\1)", "(ab", "ab)", "[ab", "a{3,1}", "*a", "(?:a*)*",
                          R"(\p{NoSuchProperty})", R"(\q)", "[[a]]"}) {
    auto re = SplitRegex::compile(bad);
    ASSERT_FALSE(re.is_ok()) << bad;
    EXPECT_NE(re.message().find(bad), std::string::npos) << re.message();
  }
}

TEST(SplitRegex, InvalidUtf8IsOnlyInNegatedClasses) {
  EXPECT_EQ(match(R"([^\s\p{L}]+)",
                  "\xFF\xFE"
                  "a"),
            2);
  EXPECT_EQ(match(R"(\p{L})", "\xFF"), -1);
}

}  // namespace
}  // namespace hearth
