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

// Deeply nested groups (a hostile tokenizer.json) are an error, not a stack overflow.
TEST(SplitRegex, DeepNestingIsAnError) {
  const std::string deep = std::string(5000, '(') + "a" + std::string(5000, ')');
  auto re = SplitRegex::compile(deep);
  ASSERT_FALSE(re.is_ok());
  EXPECT_NE(re.message().find("nested deeper than"), std::string::npos) << re.message();
  EXPECT_TRUE(SplitRegex::compile(std::string(60, '(') + "a" + std::string(60, ')')).is_ok());
}

// Quantifiers that would multiply the program: a second one in a row is Python's "multiple
// repeat" error, and nested repeats past the program bound are refused, both at once.
TEST(SplitRegex, RepeatsThatMultiplyTheProgramAreErrors) {
  for (const std::string bad :
       {std::string("\\s") + std::string(60, '+'), std::string("a{2}{3}"), std::string("a*+?")}) {
    auto re = SplitRegex::compile(bad);
    ASSERT_FALSE(re.is_ok()) << bad;
    EXPECT_NE(re.message().find("multiple repeat"), std::string::npos) << re.message();
  }
  std::string nested = "a";
  for (int i = 0; i < 12; ++i) nested = "(?:" + nested + "){1,9}";
  auto re = SplitRegex::compile(nested);
  ASSERT_FALSE(re.is_ok());
  EXPECT_NE(re.message().find("more than 65536 instructions"), std::string::npos) << re.message();
  // Lazy and possessive suffixes stay one quantifier.
  for (const char* ok : {"a+?", "a*+", "a{1,3}?", "\\p{L}++"})
    EXPECT_TRUE(SplitRegex::compile(ok).is_ok()) << ok;
}

// The pattern comes from a model's files: the error quotes it as one line.
TEST(SplitRegex, ErrorsQuoteThePatternAsOneLine) {
  auto re = SplitRegex::compile("a\n\\p{\x01}");
  ASSERT_FALSE(re.is_ok());
  EXPECT_EQ(re.message().find('\n'), std::string::npos) << re.message();
  EXPECT_EQ(re.message().find('\x01'), std::string::npos) << re.message();
  EXPECT_NE(re.message().find("\"a\\n\\p{\\x01}\""), std::string::npos) << re.message();
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
