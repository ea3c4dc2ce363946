// The token mask against a brute-force scan of every token (step the matcher through its bytes)
// along random constrained walks, over a vocabulary with byte-fallback-like single bytes, split
// UTF-8 and multi-byte pieces; EOS exactly when the grammar can end.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "grammar/grammar-constraint.h"

namespace hearth {
namespace {

std::vector<std::string> random_vocabulary(std::mt19937& rng, size_t n) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));  // byte fallback
  const std::vector<std::string> pieces = {"{",  "}",    "[",    "]", "\"", ":",  ",",   " ",
                                           "\n", "true", "null", "0", "12", "-",  ".",   "e",
                                           "é",  "\xc3", "😀",    "a", "ab", "\\", "\\u", "00"};
  while (v.size() < n) {
    std::string t;
    const size_t parts = 1 + rng() % 3;
    for (size_t i = 0; i < parts; ++i) t += pieces[rng() % pieces.size()];
    v.push_back(t);
  }
  v.push_back("");  // a control token: never allowed
  v.push_back("");  // EOS
  return v;
}

const char* kGrammar = R"(root ::= "{" ws (pair ("," ws pair)*)? "}"
pair ::= str ws ":" ws value ws
value ::= str | num | "true" | "null" | "[" ws (value ws ("," ws value ws)*)? "]" | root
str ::= "\"" ([^"\\] | "\\" ["\\nu])* "\""
num ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \n]?
)";

TEST(TokenMask, EqualsBruteForceAlongRandomWalks) {
  std::mt19937 rng(7);
  auto tokens = random_vocabulary(rng, 3000);
  const int32_t eos = int32_t(tokens.size()) - 1;
  std::vector<uint8_t> ends(tokens.size(), 0);
  ends[size_t(eos)] = 1;
  auto vocab = std::make_shared<const TokenVocabulary>(tokens, ends);
  auto parsed = parse_gbnf(kGrammar);
  ASSERT_TRUE(parsed.is_ok()) << parsed.message();
  auto grammar = std::make_shared<const Grammar>(std::move(parsed.value()));

  int ended = 0;
  for (int walk = 0; walk < 30; ++walk) {
    GrammarConstraintOptions opt;
    opt.max_cached_masks = walk % 2 ? 1024 : 2;        // with and without reuse
    opt.max_matcher_states = walk % 3 ? 1 << 16 : 64;  // and through rebases
    GrammarConstraint c(grammar, vocab, opt);
    GrammarMatcher reference(grammar);  // independent: steps each token's bytes
    GrammarMatcher::StateId ref = reference.start();
    std::string text;
    for (int step = 0; step < 200; ++step) {
      std::vector<int32_t> want;
      for (int32_t id = 0; id < int32_t(tokens.size()); ++id) {
        bool ok;
        if (id == eos)
          ok = reference.can_end(ref);
        else if (tokens[size_t(id)].empty())
          ok = false;
        else
          ok = reference.step(ref, tokens[size_t(id)]) != GrammarMatcher::kDead;
        if (ok) want.push_back(id);
      }
      std::vector<float> logits(tokens.size() + 5, 1.0f);  // the model's rows may be padded
      c.mask(logits);
      std::vector<int32_t> got;
      for (int32_t id = 0; id < int32_t(logits.size()); ++id)
        if (std::isfinite(logits[size_t(id)])) got.push_back(id);
      ASSERT_EQ(got, want) << "walk " << walk << " step " << step << " after '" << text << "'";
      ASSERT_FALSE(want.empty());
      EXPECT_EQ(c.can_end(), reference.can_end(ref));
      // Prefer ending after a while, so walks finish; otherwise a random allowed token.
      int32_t pick = want[rng() % want.size()];
      if (step > 60 && reference.can_end(ref)) pick = eos;
      ASSERT_TRUE(c.accept(pick).is_ok());
      if (pick == eos) {
        ++ended;
        EXPECT_TRUE(c.complete());
        break;
      }
      text += tokens[size_t(pick)];
      ref = reference.step(ref, tokens[size_t(pick)]);
    }
  }
  EXPECT_GT(ended, 0);
}

TEST(TokenMask, RejectsTokensTheGrammarForbids) {
  std::vector<std::string> tokens = {"a", "b", "ab", "", ""};
  std::vector<uint8_t> ends = {0, 0, 0, 0, 1};
  auto vocab = std::make_shared<const TokenVocabulary>(tokens, ends);
  auto parsed = parse_gbnf("root ::= \"ab\"");
  ASSERT_TRUE(parsed.is_ok());
  GrammarConstraint c(std::make_shared<const Grammar>(std::move(parsed.value())), vocab);
  EXPECT_FALSE(c.accept(1).is_ok());  // "b" first
  EXPECT_FALSE(c.accept(3).is_ok());  // control token
  EXPECT_FALSE(c.accept(4).is_ok());  // EOS before the end
  EXPECT_FALSE(c.accept(99).is_ok());
  EXPECT_FALSE(c.complete());
  ASSERT_TRUE(c.accept(0).is_ok());
  ASSERT_TRUE(c.accept(1).is_ok());
  EXPECT_TRUE(c.can_end());
  EXPECT_TRUE(c.complete());  // nothing can follow "ab"
  std::vector<float> logits(5, 0.0f);
  c.mask(logits);
  EXPECT_EQ(logits, (std::vector<float>{-INFINITY, -INFINITY, -INFINITY, -INFINITY, 0.0f}));
}

// A budget shorter than the grammar's shortest completion: the mask still allows the tokens that
// get closest to the end (the output then stops by length), never nothing at all.
TEST(TokenMask, ABudgetBelowTheShortestCompletionKeepsTheShortestWayOpen) {
  std::vector<std::string> tokens = {"a", "b", "c", "x", "y", ""};
  std::vector<uint8_t> ends = {0, 0, 0, 0, 0, 1};
  auto vocab = std::make_shared<const TokenVocabulary>(tokens, ends);
  auto parsed = parse_gbnf("root ::= \"abcabc\" | \"xyxyxyxy\"");
  ASSERT_TRUE(parsed.is_ok());
  GrammarConstraint c(std::make_shared<const Grammar>(std::move(parsed.value())), vocab);
  c.set_token_budget(3);
  std::vector<float> logits(6, 0.0f);
  c.mask(logits);
  EXPECT_EQ(logits,
            (std::vector<float>{0.0f, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}));
  ASSERT_TRUE(c.accept(0).is_ok());
  c.set_token_budget(2);
  EXPECT_TRUE(c.allows(1));
  EXPECT_FALSE(c.allows(5));
}

}  // namespace
}  // namespace hearth
