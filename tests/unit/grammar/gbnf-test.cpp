// GBNF parser and byte matcher: each construct against hand-written cases, random grammars
// against std::regex (an independent matcher) and malformed grammars against their messages.
#include <gtest/gtest.h>

#include <pthread.h>

#include <random>
#include <regex>

#include "grammar-test-util.h"
#include "grammar/grammar.h"

namespace hearth {
namespace {

using test::grammar_matches;
using test::grammar_prefix;

std::shared_ptr<const Grammar> compile(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g.is_ok()) << g.message() << "\n" << text;
  if (!g) return nullptr;
  return std::make_shared<const Grammar>(std::move(g.value()));
}

struct Case {
  std::string grammar;
  std::vector<std::string> accept, reject;
};

TEST(Gbnf, ConstructsMatchExactlyTheirLanguage) {
  const std::vector<Case> cases = {
      {R"(root ::= "abc")", {"abc"}, {"", "ab", "abcd", "abd"}},
      {R"(root ::= "a" | "bc" | "")", {"a", "bc", ""}, {"b", "ab", "abc"}},
      {R"(root ::= ("a" | "b") "c")", {"ac", "bc"}, {"c", "abc"}},
      {R"(root ::= "a"* "b")", {"b", "ab", "aaaab"}, {"", "a", "ba"}},
      {R"(root ::= "ab"+)", {"ab", "abab"}, {"", "a", "aba"}},
      {R"(root ::= "x" "y"? "z")", {"xz", "xyz"}, {"xyyz", "x"}},
      {R"(root ::= [0-9]{3})", {"123", "000"}, {"12", "1234", "12a"}},
      {R"(root ::= [a-c]{2,})", {"ab", "abcabc"}, {"a", "abd"}},
      {R"(root ::= [a-c]{1,3} "!")", {"a!", "abc!"}, {"!", "abca!"}},
      {R"g(root ::= "(" [^()]* ")")g", {"()", "(abc)", "(é)"}, {"(()", "(a))"}},
      {R"(root ::= [a-zA-Z_] [a-zA-Z0-9_]*)", {"x", "_a9"}, {"9a", ""}},
      {R"(root ::= "\x41\u00e9\U0001F600\t\n\\\"")", {"Aé😀\t\n\\\""}, {"A"}},
      {R"(root ::= [\[\]\-\^]+)", {"[]-^"}, {"a"}},
      {R"(root ::= [-a]+ [b-])", {"-a-b", "a-"}, {"b"}},
      {"root ::= [α-ω]+", {"αβγ", "ω"}, {"a", "Ω"}},
      {"root ::= .", {"a", "é", "😀", "\n"}, {"", "ab", "\xff", "\xc3", "\xed\xa0\x80"}},
      {"root ::= [^a]", {"b", "é", "\x7f"}, {"a", "\xc3\x28", "\xc0\x80"}},
      {"root ::= item (\",\" item)*\nitem ::= [0-9]+ # numbers\n", {"1", "1,22,3"}, {"1,", ",1"}},
      {"root ::=\n  \"a\"\n  | \"b\"\n", {"a", "b"}, {"ab"}},
      {"root ::= (\n  \"a\"\n  \"b\"\n)", {"ab"}, {"a"}},
      // Right recursion (and deep nesting) through rule references.
      {"root ::= \"[\" (root (\",\" root)*)? \"]\"",
       {"[]", "[[],[[]]]", "[[[[[[[[]]]]]]]]"},
       {"[", "[]]", "[,]"}},
      // A nullable rule in front of a recursive one is not left recursion.
      {"root ::= ws \"a\" root | ws \"b\"\nws ::= \" \"?", {"b", " a b", "aab"}, {"a", "  b"}},
  };
  for (const auto& c : cases) {
    auto g = compile(c.grammar);
    ASSERT_TRUE(g);
    for (const auto& s : c.accept) EXPECT_TRUE(grammar_matches(g, s)) << c.grammar << " | " << s;
    for (const auto& s : c.reject) EXPECT_FALSE(grammar_matches(g, s)) << c.grammar << " | " << s;
  }
}

TEST(Gbnf, PrefixesOfIncompleteUtf8AreLive) {
  auto g = compile("root ::= \"é\"+");
  ASSERT_TRUE(g);
  EXPECT_TRUE(grammar_prefix(g, "\xc3"));  // half of é
  EXPECT_FALSE(grammar_matches(g, "\xc3"));
  EXPECT_TRUE(grammar_matches(g, "éé"));
  EXPECT_FALSE(grammar_prefix(g, "\xc3\xa8"));  // è
}

// llama.cpp's json.gbnf, as published.
const char* kJsonGbnf = R"(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)";

TEST(Gbnf, LlamaCppJsonGrammar) {
  auto g = compile(kJsonGbnf);
  ASSERT_TRUE(g);
  for (const char* ok : {"{}", R"({"a": 1})", R"({"a":[1,2.5,-3e4,true,null,{"b":"\u00e9\n"}]})",
                         "{\n  \"k\": \"v\"\n}"})
    EXPECT_TRUE(grammar_matches(g, ok)) << ok;
  for (const char* bad : {"", "[]", R"({"a"})", R"({"a":})", R"({a:1})", R"({"a":01x})",
                          "{\"a\":\"\x01\"}", R"({"a":"\q"})", R"({"a":1,})"})
    EXPECT_FALSE(grammar_matches(g, bad)) << bad;
}

// Random regular grammars written both as GBNF and as an ECMAScript regex; std::regex decides
// membership independently of the matcher.
struct RandomExpr {
  std::string gbnf, regex;
};

RandomExpr random_expr(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  const int kind = depth <= 0 ? pick(2) : pick(6);
  switch (kind) {
    case 0: {  // literal of 1-2 chars from "abc"
      std::string s(size_t(1 + pick(2)), 'a');
      for (char& c : s) c = char('a' + pick(3));
      return {"\"" + s + "\"", s};
    }
    case 1: {  // class
      static const char* kClasses[][2] = {{"[ab]", "[ab]"}, {"[^a]", "[^a]"}, {"[b-c]", "[b-c]"}};
      const auto& c = kClasses[pick(3)];
      return {c[0], c[1]};
    }
    case 2: {  // sequence
      auto a = random_expr(rng, depth - 1), b = random_expr(rng, depth - 1);
      return {"(" + a.gbnf + " " + b.gbnf + ")", "(?:" + a.regex + b.regex + ")"};
    }
    case 3: {  // alternation
      auto a = random_expr(rng, depth - 1), b = random_expr(rng, depth - 1);
      return {"(" + a.gbnf + " | " + b.gbnf + ")", "(?:" + a.regex + "|" + b.regex + ")"};
    }
    default: {  // repetition
      auto a = random_expr(rng, depth - 1);
      static const char* kOps[] = {"*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}"};
      const std::string op = kOps[pick(7)];
      return {"(" + a.gbnf + ")" + op, "(?:" + a.regex + ")" + op};
    }
  }
}

TEST(Gbnf, RandomGrammarsAgreeWithStdRegex) {
  std::mt19937 rng(1234);
  int accepted = 0, total = 0;
  for (int round = 0; round < 300; ++round) {
    const RandomExpr e = random_expr(rng, 3);
    auto g = compile("root ::= " + e.gbnf);
    ASSERT_TRUE(g);
    const std::regex re(e.regex);
    for (int k = 0; k < 60; ++k) {
      std::string s(size_t(rng() % 7), 'a');
      for (char& c : s) c = "abcd"[rng() % 4];
      const bool want = std::regex_match(s, re);
      EXPECT_EQ(grammar_matches(g, s), want)
          << e.gbnf << " vs /" << e.regex << "/ on '" << s << "'";
      accepted += want;
      ++total;
    }
  }
  EXPECT_GT(accepted, total / 20);  // the comparison covers both outcomes
}

TEST(Gbnf, MalformedGrammarsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "no rule named 'root'"},
      {"start ::= \"a\"", "no rule named 'root'"},
      {"root \"a\"", "line 1 column 6: expected '::='"},
      {"root ::= \"a\"\n::= \"b\"", "line 2 column 1: expected a rule name"},
      {"root ::= item", "rule 'item' is not defined"},
      {"root ::= \"abc", "unterminated string literal"},
      {"root ::= [abc", "unterminated character class"},
      {"root ::= \"\\q\"", "unknown escape '\\q'"},
      {"root ::= \"\\x4\"", "expected 2 hex digits"},
      {"root ::= [z-a]", "end before its start"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root ::= \"a\" )", "unexpected ')'"},
      {"root ::= * \"a\"", "'*' follows nothing"},
      {"root ::= \"a\"{3,2}", "max < min"},
      {"root ::= \"a\"{2", "expected ',' or '}' in a repetition"},
      {"root ::= \"a\"{2,3", "expected '}' to end a repetition"},
      {"root ::= \"a\"{99999999}", "repetition count above"},
      {"root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice"},
      {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
      {"root ::= x\nx ::= y \"a\"\ny ::= \"\" | x", "is left-recursive"},
      {"root ::= \"a\" root", "rule 'root' can never finish"},
      {"root ::= \"a\" | x\nx ::= \"b\" x", "rule 'x' can never finish"},
      {"root ::= \"\xff\"", "invalid UTF-8"},
      {"root ::= \"\\ud800\"", "surrogate"},
      {"root ::= [\\U00110000]", "beyond U+10FFFF"},
      // The message quotes the grammar as one line: a control byte is escaped.
      {"root ::= \"\\\n\"", "unknown escape '\\\\n'"},
  };
  for (const auto& [text, want] : cases) {
    auto g = parse_gbnf(text);
    ASSERT_FALSE(g.is_ok()) << text;
    EXPECT_NE(g.message().find(want), std::string::npos) << text << " -> " << g.message();
    EXPECT_EQ(g.message().rfind("grammar: ", 0), 0u) << g.message();
    EXPECT_EQ(g.message().find('\n'), std::string::npos) << g.message();
  }
}

TEST(Gbnf, NestedRepetitionSharesItsRulesAndNullableLoopsEnd) {
  // Each level refers to the one inside, so the grammar stays small though its language is not.
  auto g = compile("root ::= (((\"ab\"{10}){10}){10})");
  ASSERT_TRUE(g);
  EXPECT_LT(g->elements.size(), 200u);
  EXPECT_TRUE(grammar_matches(g, std::string(2000, 'a').replace(1, 1, "b")) == false);
  std::string s;
  for (int i = 0; i < 1000; ++i) s += "ab";
  EXPECT_TRUE(grammar_matches(g, s));
  EXPECT_FALSE(grammar_matches(g, s + "ab"));
  // A repeated nullable item: the closure must stop, the language is (a|b)*.
  auto star = compile("root ::= (\"a\"? | \"b\")* \"!\"");
  ASSERT_TRUE(star);
  EXPECT_TRUE(grammar_matches(star, "!"));
  EXPECT_TRUE(grammar_matches(star, "abba!"));
  EXPECT_FALSE(grammar_matches(star, "abc!"));
}

// A request's grammar is a string: its nesting is bounded here, not by the HTTP layer's JSON
// limits, so deep groups must be an error rather than a stack overflow.
TEST(Gbnf, DeepGroupsAreAnError) {
  const std::string deep =
      "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  auto g = parse_gbnf(deep);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.message().find("groups nested deeper than 200"), std::string::npos) << g.message();
  EXPECT_TRUE(
      parse_gbnf("root ::= " + std::string(150, '(') + "\"a\"" + std::string(150, ')')).is_ok());
}

// A client's optional repetition of optional parts: the closure walks the whole chain without
// consuming a byte. It must not recurse once an element (a server thread has a smaller stack
// than the main one), and nested chains that multiply past the matcher's bound are refused.
TEST(Gbnf, LongNullableChainsRunOnASmallStack) {
  auto chain = compile("root ::= (\"a\"?){0,9999} \"!\"");
  ASSERT_TRUE(chain);
  struct Run {
    std::shared_ptr<const Grammar> g;
    bool ok = false;
  } run{chain};
  // A thread of 256 KiB (the recursive closure needed ~2 MB for this chain).
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  pthread_t t;
  ASSERT_EQ(pthread_create(
                &t, &attr,
                [](void* p) -> void* {
                  auto* r = static_cast<Run*>(p);
                  // (each step's closure walks the rest of the chain: a few bytes suffice)
                  r->ok = grammar_matches(r->g, "aaa!") && grammar_matches(r->g, "!") &&
                          !grammar_matches(r->g, "a!a");
                  return nullptr;
                },
                &run),
            0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_TRUE(run.ok);

  auto nested = compile("root ::= (((\"a\"?){0,200}){0,200}){0,200} \"!\"");
  ASSERT_TRUE(nested);
  GrammarMatcher m(nested);
  EXPECT_TRUE(m.too_large());
  EXPECT_EQ(m.start(), GrammarMatcher::kDead);
  // Below the bound the same shape matches as it should.
  auto small = compile("root ::= ((\"a\"?){0,20}){0,20} \"!\"");
  ASSERT_TRUE(small);
  EXPECT_TRUE(grammar_matches(small, std::string(400, 'a') + "!"));
  EXPECT_FALSE(grammar_matches(small, std::string(401, 'a') + "!"));
}

TEST(Gbnf, ElementLimitStopsHugeGrammars) {
  GrammarLimits limits;
  limits.max_elements = 1000;
  auto g = parse_gbnf("root ::= \"a\"{600} \"b\"{600}", limits);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.message().find("elements"), std::string::npos) << g.message();
}

}  // namespace
}  // namespace hearth
