// GenerationStep, the per-token bookkeeping every generate loop shares (Session::generate, the
// server's scheduler): finish reasons, stop strings held back and cut, UTF-8 held until whole,
// the logit bias and a constraint's mask working on a copy of the logits, a refused token.
// Over the kjv-13m vocabulary (SentencePiece with byte-fallback tokens).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>

#include "formats/gguf.h"
#include "runtime/generation-step.h"
#include "support/test-data.h"

namespace hearth {
namespace {

// Allows one token until it is taken, then is complete; refuses anything else.
class OneTokenConstraint final : public TokenConstraint {
 public:
  explicit OneTokenConstraint(int32_t only) : only_(only) {}
  void mask(std::span<float> logits) override {
    for (size_t i = 0; i < logits.size(); ++i)
      if (int32_t(i) != only_) logits[i] = -std::numeric_limits<float>::infinity();
  }
  Status accept(int32_t token) override {
    if (token != only_) return Status::error("token " + std::to_string(token) + " not allowed");
    done_ = true;
    return Status::ok();
  }
  bool complete() const override { return done_; }
  bool can_end() const override { return done_; }
  void set_token_budget(int64_t tokens_left) override { budget = tokens_left; }
  int64_t budget = -1;

 private:
  int32_t only_;
  bool done_ = false;
};

class GenerationStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = GgufFile::open(test::shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"));
    ASSERT_TRUE(g.is_ok()) << g.message();
    auto t = Tokenizer::from_gguf(g.value());
    ASSERT_TRUE(t.is_ok()) << t.message();
    tok_ = std::move(t).value();
  }
  std::vector<int32_t> ids(const std::string& text) const { return tok_->encode(text, false); }
  // Takes every token of `text`; returns the text released and whether the step went on.
  bool take_all(GenerationStep& step, const std::string& text, std::string* out) const {
    for (int32_t id : ids(text)) {
      std::string piece;
      const bool more = step.take(id, &piece);
      *out += piece;
      if (!more) return false;
    }
    return true;
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(GenerationStepTest, MaxTokensEndsWithLengthAndEveryTokenIsEmitted) {
  GenerateOptions opt;
  opt.max_tokens = 3;
  GenerationStep step(*tok_, opt);
  const std::vector<int32_t> t = ids(" And the king said unto them");
  ASSERT_GE(t.size(), 4u);
  std::string text, piece;
  for (int i = 0; i < 3; ++i) {
    const bool more = step.take(t[size_t(i)], &piece);
    EXPECT_TRUE(step.emitted());
    text += piece;
    EXPECT_EQ(more, i < 2);
  }
  EXPECT_EQ(step.finish_reason(), "length");
  EXPECT_EQ(step.generated(), 3);
  text += step.flush();
  EXPECT_EQ(text, tok_->decode({t[0], t[1], t[2]}));
}

TEST_F(GenerationStepTest, StopStringIsCutAndNothingAfterItIsReleased) {
  GenerateOptions opt;
  opt.stop = {"king"};
  GenerationStep step(*tok_, opt);
  std::string text;
  EXPECT_FALSE(take_all(step, "And the king said", &text));
  EXPECT_EQ(step.finish_reason(), "stop");
  EXPECT_TRUE(step.stop_string_matched());
  EXPECT_EQ(text + step.flush(), " And the ");  // SentencePiece's leading space, no "king"
}

TEST_F(GenerationStepTest, EndTokenStopsUnlessIgnoredAndIsNeverText) {
  const int32_t eos = tok_->eos_id();
  ASSERT_GE(eos, 0);
  std::string piece;
  GenerationStep step(*tok_, GenerateOptions{});
  EXPECT_FALSE(step.take(eos, &piece));
  EXPECT_FALSE(step.emitted());
  EXPECT_EQ(step.finish_reason(), "stop");
  EXPECT_EQ(step.generated(), 0);

  GenerateOptions ignore;
  ignore.ignore_eos = true;
  GenerationStep going_on(*tok_, ignore);
  EXPECT_TRUE(going_on.take(eos, &piece));
  EXPECT_TRUE(going_on.emitted());
}

TEST_F(GenerationStepTest, MultiByteCharactersAreHeldUntilWhole) {
  // "🙂" is four byte-fallback tokens in this vocabulary (after the SentencePiece space): no
  // partial character is released before the fourth.
  const std::vector<int32_t> t = ids("🙂");
  ASSERT_EQ(t.size(), 5u) << "expected a space token and four byte-fallback tokens";
  GenerationStep step(*tok_, GenerateOptions{});
  std::string text, piece;
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(step.take(t[i], &piece));
    text += piece;
  }
  EXPECT_EQ(text.find('\xF0'), std::string::npos) << "a partial character was released";
  ASSERT_TRUE(step.take(t[4], &piece));
  EXPECT_EQ(text + piece, " 🙂");
}

TEST_F(GenerationStepTest, BiasAndConstraintWorkOnACopyOfTheLogits) {
  const int32_t n_vocab = int32_t(tok_->n_vocab());
  std::vector<float> logits(size_t(n_vocab), 0.0f);
  logits[10] = 5.0f;  // the greedy pick without bias
  const std::vector<float> before = logits;

  GenerateOptions biased;
  biased.sampling.temperature = 0;
  biased.logit_bias = {{20, 100.0f}, {n_vocab + 5, 100.0f}};  // an id past the vocabulary: ignored
  GenerationStep b(*tok_, biased);
  EXPECT_EQ(b.pick(logits.data(), n_vocab, {}, 100), 20);
  EXPECT_EQ(logits, before);

  GenerateOptions constrained;
  constrained.sampling.temperature = 0;
  constrained.max_tokens = 8;
  auto c = std::make_shared<OneTokenConstraint>(30);
  constrained.constraint = c;
  GenerationStep s(*tok_, constrained);
  EXPECT_EQ(s.pick(logits.data(), n_vocab, {}, 5), 30);
  EXPECT_EQ(c->budget, 5);  // the context's 5 positions, fewer than max_tokens' 8
  EXPECT_EQ(logits, before);
  std::string piece;
  EXPECT_FALSE(s.take(30, &piece));  // complete after its one token
  EXPECT_TRUE(s.emitted());
  EXPECT_EQ(s.finish_reason(), "stop");
}

TEST_F(GenerationStepTest, ARefusedTokenIsAnErrorWithNoText) {
  GenerateOptions opt;
  opt.constraint = std::make_shared<OneTokenConstraint>(30);
  GenerationStep step(*tok_, opt);
  std::string piece = "stale";
  EXPECT_FALSE(step.take(31, &piece));
  EXPECT_FALSE(step.emitted());
  EXPECT_EQ(piece, "");
  EXPECT_EQ(step.finish_reason(), "error");
  EXPECT_NE(step.error().message().find("not allowed"), std::string::npos);
  EXPECT_EQ(step.flush(), "");
}

TEST_F(GenerationStepTest, UnderAConstraintAnEndTokenEndsEvenWithIgnoreEos) {
  GenerateOptions opt;
  opt.ignore_eos = true;
  opt.constraint = std::make_shared<OneTokenConstraint>(tok_->eos_id());
  GenerationStep step(*tok_, opt);
  std::string piece;
  EXPECT_FALSE(step.take(tok_->eos_id(), &piece));
  EXPECT_EQ(step.finish_reason(), "stop");
}

}  // namespace
}  // namespace hearth
