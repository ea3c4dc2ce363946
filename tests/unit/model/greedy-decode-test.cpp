// Model::decode_greedy against the loop it replaces (decode + greedy_argmax per token) on the
// golden kjv-13m model: full runs, early stops, a full context, and Session::generate at
// temperature 0 against the sampler loop. New stop conditions: add a case beside these.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "model/model.h"
#include "runtime/session.h"
#include "support/greedy-reference.h"
#include "support/test-data.h"

namespace hearth {
namespace {

const std::vector<int32_t> kPrompt = {1, 450, 3186, 310, 278, 5120};

std::string model_path() {
  return test::shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf");
}

LoadOptions cpu_options() {
  LoadOptions opt;
  opt.n_threads = 2;
  opt.use_weight_cache = false;
  return opt;
}

class GreedyDecodeTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model(model_path(), cpu_options());
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = m.value();
  }
  static void TearDownTestSuite() { model_.reset(); }

  // A cache of `cap` positions holding the prompt; returns the prompt's greedy next token.
  int32_t start(KvCache& kv, ForwardScratch& scratch, int64_t cap) {
    return test::prefill_and_pick(*model_, kPrompt, cap, kv, scratch);
  }

  // The loop decode_greedy replaces: n steps of decode + host argmax from `token`.
  std::vector<int32_t> reference(KvCache& kv, ForwardScratch& scratch, int32_t token, int n) {
    return test::greedy_reference(*model_, kv, scratch, token, n);
  }

  static std::shared_ptr<Model> model_;
};
std::shared_ptr<Model> GreedyDecodeTest::model_;

TEST(GreedyArgmax, LowestIndexOnTiesNanIgnored) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ties = {1, 3, 2, 3, 3};
  EXPECT_EQ(greedy_argmax(ties.data(), 5), 1);
  const std::vector<float> nans = {nan, -1, nan, 0.5f, nan};
  EXPECT_EQ(greedy_argmax(nans.data(), 5), 3);
  const std::vector<float> all_nan = {nan, nan, nan};
  EXPECT_EQ(greedy_argmax(all_nan.data(), 3), 0);
  const std::vector<float> neg_inf = {nan, -inf, -inf};
  EXPECT_EQ(greedy_argmax(neg_inf.data(), 3), 0);
  const std::vector<float> pos_inf = {1, inf, nan, inf};
  EXPECT_EQ(greedy_argmax(pos_inf.data(), 4), 1);
}

TEST(GreedyArgmax, SamplerAtTemperatureZeroAgrees) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_TRUE(is_plain_greedy(p));
  Sampler s(p);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> cases = {
      {1, 3, 2, 3, 3}, {nan, -1, nan, 0.5f, nan}, {nan, nan}, {-2, -2, -3}};
  for (const auto& c : cases)
    EXPECT_EQ(s.sample(c.data(), int32_t(c.size()), {}),
              greedy_argmax(c.data(), int64_t(c.size())));
  SamplingParams pen = p;
  pen.repeat_penalty = 1.1f;
  EXPECT_FALSE(is_plain_greedy(pen));
  pen = p;
  pen.presence_penalty = 0.5f;
  EXPECT_FALSE(is_plain_greedy(pen));
  pen = p;
  pen.temperature = 0.7f;
  EXPECT_FALSE(is_plain_greedy(pen));
}

TEST_F(GreedyDecodeTest, MatchesDecodeArgmaxLoop) {
  constexpr int kSteps = 24;
  KvCache kv_ref, kv;
  ForwardScratch s_ref, s;
  const int32_t first = start(kv_ref, s_ref, 64);
  const std::vector<int32_t> want = reference(kv_ref, s_ref, first, kSteps);
  ASSERT_EQ(start(kv, s, 64), first);
  std::vector<int32_t> got;
  auto run = model_->decode_greedy(kv, first, kSteps, s, [&](int32_t t) {
    got.push_back(t);
    return true;
  });
  ASSERT_TRUE(run.is_ok()) << run.message();
  EXPECT_EQ(run->steps, kSteps);
  EXPECT_FALSE(run->context_full);
  EXPECT_EQ(got, want);
  EXPECT_EQ(kv.used(), kv_ref.used());
  EXPECT_EQ(kv.used(), int64_t(kPrompt.size()) + kSteps);
}

// A served step's outputs (Model::forward_picks) against forward(): every row's pick is the
// argmax of forward's row, the rows asked for are forward's rows bit for bit, and the caches
// advance alike. Segments: a prompt (its last row), a decode step, a prompt with all its rows.
TEST_F(GreedyDecodeTest, ForwardPicksMatchForwardLogits) {
  const int64_t V = model_->hparams().n_vocab;
  struct Caches {
    KvCache prompt, decode, all_rows;
  };
  auto make = [&](Caches& c, ForwardScratch& s) {
    auto a = model_->new_kv_cache(64), b = model_->new_kv_cache(64);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    c.prompt = std::move(a).value();
    c.all_rows = std::move(b).value();
    start(c.decode, s, 64);
  };
  Caches ref, got;
  ForwardScratch s_ref, s;
  make(ref, s_ref);
  make(got, s);
  const std::vector<int32_t> tokens = {1, 450, 3186, 310, 278, 5120, 42, 1, 450, 3186};
  auto segments = [&](Caches& c) {
    return std::vector<BatchSegment>{{&c.prompt, 0, 6, false},
                                     {&c.decode, int64_t(kPrompt.size()), 1, false},
                                     {&c.all_rows, 0, 3, true}};
  };
  std::vector<float> want;
  ASSERT_TRUE(model_->forward(tokens, segments(ref), s_ref, &want).is_ok());
  ASSERT_EQ(want.size(), size_t(5 * V));
  const std::vector<uint8_t> want_logits = {1, 0, 1, 0, 1};
  std::vector<float> logits;
  std::vector<int32_t> ids;
  ASSERT_TRUE(
      model_->forward_picks(tokens, segments(got), s, want_logits, {}, &logits, &ids).is_ok());
  ASSERT_EQ(ids.size(), 5u);
  ASSERT_EQ(logits.size(), want.size());
  for (int64_t r = 0; r < 5; ++r) {
    const float* row = want.data() + r * V;
    EXPECT_EQ(ids[size_t(r)], greedy_argmax(row, V)) << "row " << r;
    if (want_logits[size_t(r)]) {
      EXPECT_EQ(std::memcmp(logits.data() + r * V, row, size_t(V) * 4), 0) << "row " << r;
    }
  }
  EXPECT_EQ(got.prompt.used(), 6);
  EXPECT_EQ(got.decode.used(), int64_t(kPrompt.size()) + 1);
  EXPECT_EQ(got.all_rows.used(), 3);
  // One flag per output row, or an error.
  EXPECT_FALSE(model_
                   ->forward_picks({7}, {{&got.decode, got.decode.used(), 1, false}}, s, {}, {},
                                   &logits, &ids)
                   .is_ok());
  // The CPU draws nothing itself (its host sampler reads the rows): a draw is refused.
  Backend::RowDraw draw;
  draw.rule.temperature = 0.8f;
  const std::vector<uint8_t> one = {0};
  EXPECT_FALSE(model_
                   ->forward_picks({7}, {{&got.decode, got.decode.used(), 1, false}}, s, one,
                                   {&draw, 1}, &logits, &ids)
                   .is_ok());
}

TEST_F(GreedyDecodeTest, EarlyStopLeavesCacheAsTheLoopAndResumes) {
  constexpr int kSteps = 20, kStopAt = 7;
  KvCache kv_ref, kv;
  ForwardScratch s_ref, s;
  const int32_t first = start(kv_ref, s_ref, 64);
  const std::vector<int32_t> want = reference(kv_ref, s_ref, first, kSteps);
  start(kv, s, 64);
  std::vector<int32_t> got;
  auto run = model_->decode_greedy(kv, first, kSteps, s, [&](int32_t t) {
    got.push_back(t);
    return int(got.size()) < kStopAt;
  });
  ASSERT_TRUE(run.is_ok()) << run.message();
  EXPECT_EQ(run->steps, kStopAt);
  EXPECT_FALSE(run->context_full);
  EXPECT_EQ(kv.used(), int64_t(kPrompt.size()) + kStopAt);
  // Resuming from the last token continues exactly where the uninterrupted run went.
  auto rest = model_->decode_greedy(kv, got.back(), kSteps - kStopAt, s, [&](int32_t t) {
    got.push_back(t);
    return true;
  });
  ASSERT_TRUE(rest.is_ok()) << rest.message();
  EXPECT_EQ(got, want);
  EXPECT_EQ(kv.used(), kv_ref.used());
}

TEST_F(GreedyDecodeTest, StopsWhenTheContextIsFull) {
  const int64_t cap = int64_t(kPrompt.size()) + 5;
  KvCache kv_ref, kv;
  ForwardScratch s_ref, s;
  const int32_t first = start(kv_ref, s_ref, cap);
  const std::vector<int32_t> want = reference(kv_ref, s_ref, first, 5);
  start(kv, s, cap);
  std::vector<int32_t> got;
  auto run = model_->decode_greedy(kv, first, 100, s, [&](int32_t t) {
    got.push_back(t);
    return true;
  });
  ASSERT_TRUE(run.is_ok()) << run.message();
  EXPECT_EQ(run->steps, 5);
  EXPECT_TRUE(run->context_full);
  EXPECT_EQ(got, want);
  EXPECT_EQ(kv.used(), cap);
  // Already full: no step, no callback.
  auto again = model_->decode_greedy(kv, got.back(), 3, s, [&](int32_t) {
    ADD_FAILURE() << "callback on a full cache";
    return true;
  });
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->steps, 0);
  EXPECT_TRUE(again->context_full);
}

TEST_F(GreedyDecodeTest, ZeroStepsAndBadTokens) {
  KvCache kv;
  ForwardScratch s;
  const int32_t first = start(kv, s, 32);
  const int64_t used = kv.used();
  auto none = model_->decode_greedy(kv, first, 0, s, [](int32_t) { return true; });
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->steps, 0);
  EXPECT_FALSE(none->context_full);
  EXPECT_EQ(kv.used(), used);
  const int32_t vocab = int32_t(model_->hparams().n_vocab);
  EXPECT_FALSE(model_->decode_greedy(kv, vocab, 4, s, [](int32_t) { return true; }).is_ok());
  EXPECT_FALSE(model_->decode_greedy(kv, -1, 4, s, [](int32_t) { return true; }).is_ok());
  EXPECT_FALSE(model_->decode_greedy(kv, first, 4, s, nullptr).is_ok());
  EXPECT_EQ(kv.used(), used);
}

// Session::generate at temperature 0 (now through decode_greedy) against the sampler loop it
// ran before, built from the session's low-level calls.
class GreedyGenerateTest : public testing::Test {
 protected:
  void SetUp() override {
    auto e = Engine::load(model_path(), cpu_options());
    ASSERT_TRUE(e.is_ok()) << e.message();
    engine_ = e.value();
  }
  // The pre-decode_greedy loop: sample, stop on EOS / max tokens / full context, decode.
  std::vector<int32_t> sampler_loop(Session& s, const std::vector<int32_t>& prompt, int max,
                                    bool ignore_eos) {
    SamplingParams p;
    p.temperature = 0;
    Sampler sampler(p);
    std::vector<float> logits;
    EXPECT_TRUE(s.evaluate(prompt, &logits).is_ok());
    std::vector<int32_t> out;
    const int32_t n_vocab = int32_t(engine_->model().hparams().n_vocab);
    while (int(out.size()) < max) {
      const int32_t id = sampler.sample(logits.data(), n_vocab, s.history());
      if (!ignore_eos && engine_->tokenizer().is_end_of_generation(id)) break;
      out.push_back(id);
      if (int(out.size()) >= max || int64_t(s.history().size()) >= s.n_ctx()) break;
      EXPECT_TRUE(s.decode_one(id, &logits).is_ok());
    }
    return out;
  }
  std::shared_ptr<Engine> engine_;
};

TEST_F(GreedyGenerateTest, TemperatureZeroMatchesSamplerLoop) {
  const std::vector<int32_t> prompt =
      engine_->tokenizer().encode("And God said, Let there be light", true);
  Session ref(engine_, 128), s(engine_, 128);
  ASSERT_TRUE(ref.init().is_ok());
  ASSERT_TRUE(s.init().is_ok());
  const std::vector<int32_t> want = sampler_loop(ref, prompt, 30, false);
  GenerateOptions opt;
  opt.max_tokens = 30;
  opt.sampling.temperature = 0;
  std::string streamed;
  auto r = s.generate(prompt, opt, [&](int32_t, const std::string& piece) {
    streamed += piece;
    return true;
  });
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->tokens, want);
  EXPECT_EQ(s.history(), ref.history());
  EXPECT_EQ(r->stats.generated_tokens, int64_t(want.size()));
  EXPECT_EQ(streamed, r->text);
  EXPECT_FALSE(r->text.empty());
  if (int(want.size()) == 30) {
    EXPECT_EQ(r->stats.finish_reason, "length");
  } else {
    EXPECT_EQ(r->stats.finish_reason, "stop");
  }
}

TEST_F(GreedyGenerateTest, CancelAndContextStopsKeepHistoryConsistent) {
  const std::vector<int32_t> prompt = engine_->tokenizer().encode("In the beginning", true);
  Session ref(engine_, 64);
  ASSERT_TRUE(ref.init().is_ok());
  const std::vector<int32_t> want = sampler_loop(ref, prompt, 40, true);
  ASSERT_EQ(want.size(), 40u);
  {
    Session s(engine_, 64);
    ASSERT_TRUE(s.init().is_ok());
    GenerateOptions opt;
    opt.ignore_eos = true;
    opt.sampling.temperature = 0;
    int seen = 0;
    auto r = s.generate(prompt, opt, [&](int32_t, const std::string&) { return ++seen < 9; });
    ASSERT_TRUE(r.is_ok()) << r.message();
    EXPECT_EQ(r->stats.finish_reason, "cancelled");
    ASSERT_EQ(r->tokens.size(), 9u);
    EXPECT_EQ(r->tokens, std::vector<int32_t>(want.begin(), want.begin() + 9));
    // The prompt plus every generated token but the last went through the model.
    EXPECT_EQ(s.history().size(), prompt.size() + 8);
  }
  {
    const int64_t ctx = int64_t(prompt.size()) + 12;
    Session s(engine_, ctx);
    ASSERT_TRUE(s.init().is_ok());
    GenerateOptions opt;
    opt.ignore_eos = true;
    opt.sampling.temperature = 0;
    auto r = s.generate(prompt, opt);
    ASSERT_TRUE(r.is_ok()) << r.message();
    EXPECT_EQ(r->stats.finish_reason, "context");
    // The prompt's token and one per free position.
    ASSERT_EQ(r->tokens.size(), 13u);
    EXPECT_EQ(r->tokens, std::vector<int32_t>(want.begin(), want.begin() + 13));
    EXPECT_EQ(int64_t(s.history().size()), ctx);
  }
}

}  // namespace
}  // namespace hearth
