// The scheduler on the golden model, on the CPU or (golden_test --gpu-layers=all) the GPU, where
// a stream alone runs chained steps (scheduler-chain.cpp): its answer against the plain loop of
// decode + host argmax on a fresh cache, when a second request joins mid-stream (the chain stops
// and the next steps batch both), and when a stop string ends it inside a chain; a scheduler
// that ran its warm-up pass first; and eight requests whose CPU steps run as lanes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "runtime/scheduler.h"
#include "support/scheduler-jobs.h"
#include "support/test-data.h"

namespace hearth {

int golden_gpu_layers();  // golden-test.cpp

namespace {

using namespace std::chrono_literals;

class SchedulerGoldenTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions opt;
    opt.n_threads = 2;
    opt.gpu_layers = golden_gpu_layers();
    auto e = Engine::load(test::shared_path("goldens/kjv-13m/kjv-13m-q4_0.gguf"), opt);
    ASSERT_TRUE(e.is_ok()) << e.message();
    engine_ = e.value();
  }
  static void TearDownTestSuite() { engine_.reset(); }

  static std::vector<int32_t> prompt(const std::string& text) {
    return engine_->tokenizer().encode(text, /*add_special=*/true);
  }
  // The reference: prefill, then decode + greedy_argmax one token at a time (never chained).
  static std::vector<int32_t> plain_loop(const std::vector<int32_t>& p, int n) {
    const Model& m = engine_->model();
    auto kv = m.new_kv_cache(512, KvCacheTypes{});
    EXPECT_TRUE(kv.is_ok()) << kv.message();
    ForwardScratch scratch;
    std::vector<float> logits;
    EXPECT_TRUE(m.prefill(kv.value(), p, scratch, &logits).is_ok());
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(greedy_argmax(logits.data(), m.hparams().n_vocab));
      if (i + 1 < n) {
        EXPECT_TRUE(m.decode(kv.value(), out.back(), scratch, &logits).is_ok());
      }
    }
    return out;
  }
  // A scheduler of two slots that records the most forward passes one step line covered.
  SchedulerOptions options() {
    SchedulerOptions o;
    o.parallel = 2;
    o.ctx_size = 512;
    o.on_step = [this](const StepRecord& r) { max_passes_ = std::max(max_passes_, r.passes); };
    return o;
  }
  // On a GPU that chains, a stream alone must have run chained steps.
  void expect_chained_on_gpu() const {
    if (golden_gpu_layers() != 0) {
      EXPECT_GT(max_passes_, 1) << "no chained steps ran";
    }
  }

  static inline std::shared_ptr<Engine> engine_;
  int64_t max_passes_ = 0;  // written on the scheduler thread, read after stop()
};

TEST_F(SchedulerGoldenTest, AStreamJoinedMidwayMatchesThePlainLoop) {
  Scheduler sched(engine_, options());
  ASSERT_TRUE(sched.start().is_ok());
  const auto pa = prompt("In the beginning God created the heaven and the earth.");
  const auto pb = prompt("And the LORD spake unto Moses, saying,");
  auto a = test::scheduler_job(pa, 150);
  ASSERT_EQ(sched.submit(a), Scheduler::Submit::kOk);
  std::string text;
  while (text.size() < 40 && !a->wait_text(20ms, &text)) {
  }
  auto b = test::scheduler_job(pb, 40);  // arrives while `a` runs alone
  ASSERT_EQ(sched.submit(b), Scheduler::Submit::kOk);
  test::finish_job(*a);
  test::finish_job(*b);
  sched.stop();
  EXPECT_EQ(a->finish_reason(), "length");
  EXPECT_EQ(a->output_tokens(), plain_loop(pa, 150));
  EXPECT_EQ(b->output_tokens(), plain_loop(pb, 40));
  expect_chained_on_gpu();
}

TEST_F(SchedulerGoldenTest, AStopStringEndsAStreamAloneWhereThePlainLoopWould) {
  const auto p = prompt("And God said, Let there be light:");
  const std::vector<int32_t> cold = plain_loop(p, 120);
  const std::string cold_text = engine_->tokenizer().decode(cold);
  ASSERT_GT(cold_text.size(), 60u);
  // A stop string from the middle of the answer: a few characters after the 40th.
  const std::string stop = cold_text.substr(40, 6);
  auto j = test::scheduler_job(p, 120);
  j->generate.stop = {stop};
  Scheduler sched(engine_, options());
  ASSERT_TRUE(sched.start().is_ok());
  ASSERT_EQ(sched.submit(j), Scheduler::Submit::kOk);
  const std::string text = test::finish_job(*j);
  sched.stop();
  EXPECT_EQ(j->finish_reason(), "stop");
  EXPECT_EQ(text, cold_text.substr(0, cold_text.find(stop)));
  expect_chained_on_gpu();
}

// The warm-up passes (SchedulerOptions::warm_up_tokens: a mixed pass, a decode step, then one
// prompt at each halving, here 128 and 64 tokens) run on the slots' caches before any request:
// afterwards the pool holds no block and nothing of them leaks into later answers.
TEST_F(SchedulerGoldenTest, AWarmedUpSchedulerHoldsNoBlocksAndAnswersAsThePlainLoop) {
  SchedulerOptions o = options();
  o.parallel = 3;
  o.warm_up_tokens = 256;
  // Room for every slot's rows at once: on a GPU a block of this small model is thousands of
  // positions (a 2 MiB granule of its rows), and a pool of 3 x 512 positions holds one.
  o.kv_pool_tokens = 3 * 8192;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  EXPECT_EQ(sched.stats().kv_blocks_used, 0);
  EXPECT_EQ(sched.stats().steps, 0);  // the warm-up is no request's step
  const auto pa = prompt("In the beginning God created the heaven and the earth.");
  const auto pb = prompt("And the LORD spake unto Moses, saying,");
  // One after the other: each alone, as the plain loop runs (two streams batched may round a
  // near tie the other way on the CPU, warm-up or not).
  auto a = test::scheduler_job(pa, 60);
  ASSERT_EQ(sched.submit(a), Scheduler::Submit::kOk);
  test::finish_job(*a);
  auto b = test::scheduler_job(pb, 60);
  ASSERT_EQ(sched.submit(b), Scheduler::Submit::kOk);
  test::finish_job(*b);
  sched.stop();
  EXPECT_EQ(a->output_tokens(), plain_loop(pa, 60));
  EXPECT_EQ(b->output_tokens(), plain_loop(pb, 60));
}

// The CPU's decode lanes (--decode-lanes, model/forward-lanes.cpp) under the scheduler: eight
// requests at once on two threads, their steps as two lanes of four or as one pass of eight,
// give the same answers token for token (each row's matmuls and attention are its own in both
// forms). On the CPU whatever golden_test's --gpu-layers says: the lanes are a CPU form.
TEST(SchedulerLanes, EightRequestsAsLanesAnswerAsOnePass) {
  auto load = [](CpuOptions::Lanes lanes) {
    LoadOptions opt;
    opt.n_threads = 2;
    opt.cpu.decode_lanes = lanes;
    auto e = Engine::load(test::shared_path("goldens/kjv-13m/kjv-13m-q4_0.gguf"), opt);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return e.is_ok() ? e.value() : nullptr;
  };
  const auto on = load(CpuOptions::Lanes::kOn), off = load(CpuOptions::Lanes::kOff);
  ASSERT_TRUE(on && off);
  ASSERT_GT(on->model().head_backend()->decode_lanes(8), 1);
  ASSERT_EQ(off->model().head_backend()->decode_lanes(8), 1);
  const char* texts[] = {"In the beginning God created the heaven and the earth.",
                         "And the LORD spake unto Moses, saying,",
                         "Blessed are the poor in spirit:",
                         "And God said, Let there be light:",
                         "The LORD is my shepherd;",
                         "And it came to pass in those days,",
                         "Honour thy father and thy mother:",
                         "Now the serpent was more subtil"};
  auto serve = [&](const std::shared_ptr<Engine>& engine) {
    SchedulerOptions o;
    o.parallel = 8;
    o.ctx_size = 256;
    Scheduler sched(engine, o);
    EXPECT_TRUE(sched.start().is_ok());
    std::vector<std::shared_ptr<Job>> jobs;
    for (const char* t : texts) {
      jobs.push_back(test::scheduler_job(engine->tokenizer().encode(t, true), 48));
      EXPECT_EQ(sched.submit(jobs.back()), Scheduler::Submit::kOk);
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& j : jobs) {
      test::finish_job(*j);
      out.push_back(j->output_tokens());
    }
    sched.stop();
    return out;
  };
  const auto lanes = serve(on), pass = serve(off);
  ASSERT_EQ(lanes.size(), pass.size());
  for (size_t i = 0; i < lanes.size(); ++i) {
    EXPECT_EQ(lanes[i].size(), 48u) << texts[i];
    EXPECT_EQ(lanes[i], pass[i]) << texts[i];
  }
}

}  // namespace
}  // namespace hearth
