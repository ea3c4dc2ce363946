// The continuous-batching Scheduler (runtime/scheduler.h) on kjv-13m: a prompt prefix copied from
// another slot's cache gives the cold run's output, several choices per request share one
// prefill and follow their own seeds, a request waits for enough free slots, the counters
// say where each prompt token came from, and a long prompt is computed in chunks between a
// running request's tokens (the per-step prompt budget).
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "runtime/scheduler.h"
#include "runtime/session.h"
#include "support/scheduler-jobs.h"
#include "support/test-data.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;

class SchedulerTest : public testing::Test {
 public:  // the helpers are shared with this file's free functions
  static void SetUpTestSuite() {
    LoadOptions opt;
    opt.n_threads = 1;  // a 13M model: a second thread costs more in hand-offs than it saves
    opt.use_weight_cache = false;
    auto e = Engine::load(test::shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"), opt);
    ASSERT_TRUE(e.is_ok()) << e.message();
    engine_ = e.value();
  }
  static void TearDownTestSuite() { engine_.reset(); }

  static std::vector<int32_t> encode(const std::string& text) {
    return engine_->tokenizer().encode(text, /*add_special=*/true);
  }

  static std::shared_ptr<Job> job(const std::vector<int32_t>& prompt, int max_tokens,
                                  float temperature = 0, uint64_t seed = 0xFFFFFFFF) {
    return test::scheduler_job(prompt, max_tokens, temperature, seed);
  }
  static std::string finish(Job& j) { return test::finish_job(j); }
  // Six requests through a pool of 8 blocks (ATinyPoolQueuesAndPreempts...).
  static void tiny_pool_run(int64_t batch_tokens, int64_t step_prompt_tokens);

  static std::vector<int32_t> cold_greedy(const std::vector<int32_t>& prompt, int max_tokens,
                                          int64_t ctx) {
    Session session(engine_, ctx);
    EXPECT_TRUE(session.init().is_ok());
    GenerateOptions opt;
    opt.max_tokens = max_tokens;
    opt.ignore_eos = true;
    opt.sampling.temperature = 0;
    auto r = session.generate(prompt, opt);
    EXPECT_TRUE(r.is_ok()) << r.message();
    return r ? r->tokens : std::vector<int32_t>{};
  }

  // Submits a greedy request, waits for it, and checks its answer is the cold run's.
  static std::shared_ptr<Job> serve_greedy(Scheduler& sched, const std::vector<int32_t>& prompt,
                                           int max_tokens) {
    auto j = job(prompt, max_tokens);
    EXPECT_EQ(sched.submit(j), Scheduler::Submit::kOk);
    finish(*j);
    EXPECT_EQ(j->output_tokens(), cold_greedy(prompt, max_tokens, sched.options().ctx_size));
    return j;
  }

  // Pool tokens of `blocks` whole blocks for a scheduler of these options.
  static int64_t pool_of_blocks(const SchedulerOptions& o, int blocks) {
    Scheduler probe(engine_, o);
    EXPECT_TRUE(probe.start().is_ok());
    return blocks * probe.stats().kv_block_tokens;
  }

  static std::shared_ptr<Engine> engine_;
};
std::shared_ptr<Engine> SchedulerTest::engine_;

// A shared "system prompt" of well over kMinCopiedPrefix tokens, then a per-user question.
const std::string kShared =
    "In the beginning God created the heaven and the earth. And the earth was without form, and "
    "void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face "
    "of the waters. And God said, Let there be light: and there was light.";

TEST_F(SchedulerTest, PrefixCopiedFromABusySlotGivesTheColdOutput) {
  SchedulerOptions o;
  o.parallel = 2;
  o.ctx_size = 1024;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const auto shared = encode(kShared);
  const auto first_prompt = encode(kShared + " And the king said");
  const auto second_prompt = encode(kShared + " Who was David");
  // The first request runs long enough to keep its slot busy while the second one is placed.
  auto busy = job(first_prompt, int(o.ctx_size) - int(first_prompt.size()) - 1);
  ASSERT_EQ(sched.submit(busy), Scheduler::Submit::kOk);
  std::string text;
  while (text.empty() && !busy->wait_text(50ms, &text)) {
  }
  const int max_tokens = 32;
  auto second = job(second_prompt, max_tokens);
  ASSERT_EQ(sched.submit(second), Scheduler::Submit::kOk);
  finish(*second);
  EXPECT_FALSE(busy->wait_text(0ms, &text)) << "the source slot finished before the copy";
  busy->cancel();
  finish(*busy);

  EXPECT_EQ(second->finish_reason(), "length");
  EXPECT_EQ(second->output_tokens(), cold_greedy(second_prompt, max_tokens, o.ctx_size));
  // The common prefix came from the busy slot; only the question was computed.
  size_t common = 0;
  while (common < shared.size() && shared[common] == second_prompt[common]) ++common;
  EXPECT_GE(second->cached_tokens(), int64_t(common) - 1);
  EXPECT_LT(second->cached_tokens(), int64_t(second_prompt.size()));
  const SchedulerStats s = sched.stats();
  EXPECT_EQ(s.prefix_hits_copied, 1);
  EXPECT_EQ(s.prefix_tokens_copied, second->cached_tokens());
  EXPECT_EQ(s.prefix_hits_same_slot, 0);
  EXPECT_EQ(s.prompt_evaluated,
            int64_t(first_prompt.size() + second_prompt.size()) - second->cached_tokens());
  EXPECT_EQ(s.prompt_tokens, int64_t(first_prompt.size() + second_prompt.size()));
  sched.stop();
}

// gemma2-tiny's sliding layers (window 8) keep a ring of window + one pass (520 rows). The busy
// slot has written past the ring's end, so its rows wrapped; the copy takes the ring as it
// stands and the answer still equals a cold run's.
TEST_F(SchedulerTest, PrefixCopiedFromAWrappedRingGivesTheColdOutput) {
  LoadOptions lo;
  lo.n_threads = 1;
  lo.use_weight_cache = false;
  auto loaded = Engine::load(test::shared_path("goldens/gemma2-tiny"), lo);
  ASSERT_TRUE(loaded.is_ok()) << loaded.message();
  std::shared_ptr<const Engine> gemma = loaded.value();
  SchedulerOptions o;
  o.parallel = 2;
  o.ctx_size = 1024;
  Scheduler sched(gemma, o);
  ASSERT_TRUE(sched.start().is_ok());
  auto ring = gemma->model().new_kv_cache(o.ctx_size);
  ASSERT_TRUE(ring.is_ok());
  int64_t ring_rows = 0;
  for (int64_t l = 0; l < ring->n_layers(); ++l)
    ring_rows = std::max(ring_rows, ring->ring_rows(l));
  ASSERT_GT(ring_rows, 0) << "gemma2-tiny should have ring layers at this context";
  // A prompt longer than the ring, so that the copied prefix itself has wrapped.
  std::vector<int32_t> shared;
  for (int i = 0; int64_t(shared.size()) < ring_rows + 40; ++i)
    shared.push_back(300 + (i * 37) % 500);
  auto first_prompt = shared, second_prompt = shared;
  first_prompt.insert(first_prompt.end(), {1000, 1001, 1002});
  second_prompt.insert(second_prompt.end(), {2000, 2001, 2002, 2003});
  auto busy = job(first_prompt, int(o.ctx_size) - int(first_prompt.size()) - 1);
  ASSERT_EQ(sched.submit(busy), Scheduler::Submit::kOk);
  std::string text;
  while (busy->output_tokens().empty() && !busy->wait_text(20ms, &text)) {
  }
  const int max_tokens = 16;
  auto second = job(second_prompt, max_tokens);
  ASSERT_EQ(sched.submit(second), Scheduler::Submit::kOk);
  finish(*second);
  EXPECT_FALSE(busy->wait_text(0ms, &text)) << "the source slot finished before the copy";
  busy->cancel();
  finish(*busy);
  EXPECT_EQ(sched.stats().prefix_hits_copied, 1);
  EXPECT_EQ(second->cached_tokens(), int64_t(shared.size()));
  Session session(gemma, o.ctx_size);
  ASSERT_TRUE(session.init().is_ok());
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.ignore_eos = true;
  g.sampling.temperature = 0;
  auto cold = session.generate(second_prompt, g);
  ASSERT_TRUE(cold.is_ok()) << cold.message();
  EXPECT_EQ(second->output_tokens(), cold->tokens);
  sched.stop();
}

TEST_F(SchedulerTest, GreedyChoicesEachEqualTheColdRun) {
  SchedulerOptions o;
  o.parallel = 3;
  o.ctx_size = 256;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const auto prompt = encode("And the king said");
  const int max_tokens = 24;
  std::vector<std::shared_ptr<Job>> choices;
  for (int i = 0; i < 3; ++i) choices.push_back(job(prompt, max_tokens, 0, choice_seed(5, i)));
  ASSERT_EQ(sched.submit_choices(choices), Scheduler::Submit::kOk);
  const auto expected = cold_greedy(prompt, max_tokens, o.ctx_size);
  for (auto& c : choices) {
    finish(*c);
    EXPECT_EQ(c->output_tokens(), expected);
    EXPECT_EQ(c->prompt_tokens(), int64_t(prompt.size()));
  }
  const SchedulerStats s = sched.stats();
  EXPECT_EQ(s.prompt_tokens, int64_t(prompt.size())) << "the prompt counts once";
  EXPECT_EQ(s.prompt_evaluated, int64_t(prompt.size())) << "and is computed once";
  EXPECT_EQ(s.generated_tokens, 3 * max_tokens);
  sched.stop();
}

TEST_F(SchedulerTest, SampledChoicesFollowTheirSeedsAndRepeat) {
  SchedulerOptions o;
  o.parallel = 3;
  o.ctx_size = 256;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const auto prompt = encode("And God said");
  auto run = [&](uint64_t seed) {
    std::vector<std::shared_ptr<Job>> choices;
    for (int i = 0; i < 3; ++i) {
      choices.push_back(job(prompt, 24, 1.0f, choice_seed(seed, i)));
      choices.back()->logprobs_top = 2;
    }
    EXPECT_EQ(sched.submit_choices(choices), Scheduler::Submit::kOk);
    std::vector<std::string> texts;
    for (auto& c : choices) {
      texts.push_back(finish(*c));
      EXPECT_EQ(c->logprobs().size(), c->output_tokens().size());
    }
    return texts;
  };
  const auto a = run(1234), b = run(1234);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 3u) << "choices are independent";
  // Choice 0 is what the same request with n = 1 answers.
  auto single = job(prompt, 24, 1.0f, 1234);
  ASSERT_EQ(sched.submit(single), Scheduler::Submit::kOk);
  EXPECT_EQ(finish(*single), a[0]);
  sched.stop();
}

TEST_F(SchedulerTest, ChoicesWaitForEnoughFreeSlots) {
  SchedulerOptions o;
  o.parallel = 2;
  o.ctx_size = 512;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const auto prompt = encode("And the king said");
  auto busy = job(prompt, 400);
  ASSERT_EQ(sched.submit(busy), Scheduler::Submit::kOk);
  std::string text;
  while (text.empty() && !busy->wait_text(50ms, &text)) {
  }
  std::vector<std::shared_ptr<Job>> pair = {job(prompt, 4), job(prompt, 4)};
  ASSERT_EQ(sched.submit_choices(pair), Scheduler::Submit::kOk);
  // One slot is free, the request needs two: it waits in the queue.
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(sched.stats().queue_depth, 1);
  EXPECT_FALSE(pair[0]->wait_text(0ms, &text));
  busy->cancel();
  for (auto& c : pair) {
    finish(*c);
    EXPECT_EQ(c->finish_reason(), "length");
    EXPECT_EQ(c->output_tokens().size(), 4u);
  }
  // More choices than slots, none, or choices of different prompts are refused.
  EXPECT_EQ(sched.submit_choices({job(prompt, 4), job(prompt, 4), job(prompt, 4)}),
            Scheduler::Submit::kInvalidChoices);
  EXPECT_EQ(sched.submit_choices({}), Scheduler::Submit::kInvalidChoices);
  EXPECT_EQ(sched.submit_choices({job(prompt, 4), job(encode("Amen"), 4)}),
            Scheduler::Submit::kInvalidChoices);
  sched.stop();
}

TEST_F(SchedulerTest, ACancelledRequestEndsEveryChoice) {
  SchedulerOptions o;
  o.parallel = 3;
  o.ctx_size = 512;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const auto prompt = encode(kShared);
  std::vector<std::shared_ptr<Job>> choices;
  for (int i = 0; i < 3; ++i) choices.push_back(job(prompt, 400, 0.8f, choice_seed(9, i)));
  for (auto& c : choices) c->cancel();  // the client left before (or while) it was placed
  ASSERT_EQ(sched.submit_choices(choices), Scheduler::Submit::kOk);
  for (auto& c : choices) {
    finish(*c);
    EXPECT_EQ(c->finish_reason(), "cancelled");
  }
  EXPECT_TRUE(sched.wait_idle(10s));
  EXPECT_EQ(sched.stats().slots_busy, 0);
  sched.stop();
}

TEST(ChoiceSeed, FirstChoiceKeepsTheSeedOthersDifferAndRandomStaysRandom) {
  EXPECT_EQ(choice_seed(42, 0), 42u);
  std::set<uint64_t> seen;
  for (int i = 0; i < 8; ++i) seen.insert(choice_seed(42, i));
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(choice_seed(42, 3), choice_seed(42, 3));
  EXPECT_NE(choice_seed(42, 1), choice_seed(43, 1));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(choice_seed(0xFFFFFFFF, i), 0xFFFFFFFFu);
}

// --- The KV pool (--kv-pool-tokens): admission by blocks, preemption, cached prefixes.

std::vector<int32_t> with_tail(std::vector<int32_t> base, std::initializer_list<int32_t> tail) {
  base.insert(base.end(), tail);
  return base;
}

// A prompt of n tokens that differs from others by `salt`.
std::vector<int32_t> numbered_prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(200 + (i * 31 + salt * 97) % 700));
  return p;
}

// Also with prompt-only passes (a prompt budget of four 16-token passes), which must not keep a
// prompt waiting for blocks from holding back the decoding sequences.
TEST_F(SchedulerTest, ATinyPoolQueuesAndPreemptsYetEveryAnswerEqualsTheColdRun) {
  for (const auto& [batch_tokens, step_prompt_tokens] :
       {std::pair<int64_t, int64_t>{512, 128}, {16, 64}})
    tiny_pool_run(batch_tokens, step_prompt_tokens);
}

void SchedulerTest::tiny_pool_run(int64_t batch_tokens, int64_t step_prompt_tokens) {
  SCOPED_TRACE("batch_tokens " + std::to_string(batch_tokens) + ", step_prompt_tokens " +
               std::to_string(step_prompt_tokens));
  SchedulerOptions o;
  o.parallel = 4;
  o.ctx_size = 256;
  o.batch_tokens = batch_tokens;
  o.step_prompt_tokens = step_prompt_tokens;
  o.kv_pool_tokens = pool_of_blocks(o, 8);
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const int64_t block = sched.stats().kv_block_tokens;
  EXPECT_EQ(sched.stats().kv_blocks_total, 8);
  // Six requests of ~4 blocks each: at most two fit at once, so the rest queue, and a
  // sequence that grows into a full pool is preempted and recomputed.
  const int max_tokens = int(3 * block);
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 6; ++i) {
    jobs.push_back(job(numbered_prompt(int(block) / 2 + i, i), max_tokens));
    ASSERT_EQ(sched.submit(jobs.back()), Scheduler::Submit::kOk);
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    finish(*jobs[i]);
    EXPECT_EQ(jobs[i]->finish_reason(), "length") << jobs[i]->error();
    EXPECT_EQ(jobs[i]->output_tokens(), cold_greedy(jobs[i]->prompt, max_tokens, o.ctx_size))
        << "request " << i;
    EXPECT_EQ(jobs[i]->completion_tokens(), max_tokens);
  }
  SchedulerStats s = sched.stats();
  EXPECT_EQ(s.requests_finished, 6);
  EXPECT_EQ(s.requests_failed, 0);
  EXPECT_GE(s.preemptions + s.prefix_evictions, 1) << "the pool never ran short";
  EXPECT_EQ(s.generated_tokens, 6 * max_tokens);
  EXPECT_LE(s.kv_blocks_used, s.kv_blocks_total);  // what is left is cached prefixes
  sched.stop();
  EXPECT_EQ(sched.stats().kv_blocks_used, 0) << "every block back in the pool";
}

TEST_F(SchedulerTest, PreemptedSequenceRecomputesAndContinuesWithTheSameTokens) {
  SchedulerOptions o;
  o.parallel = 2;
  o.ctx_size = 512;
  o.kv_pool_tokens = pool_of_blocks(o, 6);
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const int64_t block = sched.stats().kv_block_tokens;
  // Both fit at admission (a prompt under a block plus the decode reserve each) and then grow
  // to four blocks each: the newer one is preempted, waits, and recomputes.
  const int max_tokens = int(3 * block + block / 2);
  auto older = job(numbered_prompt(int(block) / 2, 1), max_tokens);
  auto newer = job(numbered_prompt(int(block) / 2, 2), max_tokens);
  ASSERT_EQ(sched.submit(older), Scheduler::Submit::kOk);
  ASSERT_EQ(sched.submit(newer), Scheduler::Submit::kOk);
  finish(*older);
  finish(*newer);
  EXPECT_GE(sched.stats().preemptions, 1);
  for (const auto& j : {older, newer}) {
    EXPECT_EQ(j->finish_reason(), "length");
    EXPECT_EQ(j->output_tokens(), cold_greedy(j->prompt, max_tokens, o.ctx_size));
    EXPECT_EQ(j->prompt_tokens(), int64_t(j->prompt.size()));
  }
  sched.stop();
  EXPECT_EQ(sched.stats().kv_blocks_used, 0);
}

TEST_F(SchedulerTest, CachedPrefixHitsGiveTheMissOutputAndAreEvictedWhenThePoolIsShort) {
  SchedulerOptions o;
  o.parallel = 2;
  o.ctx_size = 512;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const auto base = encode(kShared);
  const auto first_prompt = with_tail(base, {500, 501, 502});
  const int max_tokens = 20;
  serve_greedy(sched, first_prompt, max_tokens);
  auto second = serve_greedy(sched, with_tail(base, {600, 601}), max_tokens);
  EXPECT_GE(second->cached_tokens(), int64_t(base.size()) - 1) << "the finished prefix was kept";
  sched.stop();

  // A pool that holds one long sequence: the cached prefixes of finished requests make way.
  const int64_t block = sched.stats().kv_block_tokens;
  const int64_t need = int64_t(first_prompt.size()) + max_tokens;
  o.kv_pool_tokens = ((need + block - 1) / block + 1) * block;
  Scheduler small(engine_, o);
  ASSERT_TRUE(small.start().is_ok());
  for (int i = 0; i < 3; ++i)
    serve_greedy(small, numbered_prompt(int(first_prompt.size()), 10 + i), max_tokens);
  EXPECT_GE(small.stats().prefix_evictions, 1);
  EXPECT_EQ(small.stats().requests_failed, 0);
}

// One slot, three requests: A (shared prefix), B (unrelated: A's cache is kept as an entry
// beyond the slot instead of being overwritten), C (shared prefix: adopts A's cache whole).
TEST_F(SchedulerTest, AFinishedRequestsCacheOutlivesItsSlotAndIsAdopted) {
  SchedulerOptions o;
  o.parallel = 1;
  o.ctx_size = 512;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const auto base = encode(kShared);
  const int max_tokens = 12;
  serve_greedy(sched, with_tail(base, {500, 501, 502}), max_tokens);
  serve_greedy(sched, numbered_prompt(40, 7), max_tokens);
  auto c = serve_greedy(sched, with_tail(base, {600, 601}), max_tokens);
  EXPECT_GE(c->cached_tokens(), int64_t(base.size()) - 1);
  const SchedulerStats s = sched.stats();
  EXPECT_EQ(s.prefix_hits_cached, 1);
  EXPECT_GE(s.prefix_tokens_cached, int64_t(base.size()) - 1);
  sched.stop();
  EXPECT_EQ(sched.stats().kv_blocks_used, 0);
}

// Prompts that come back (users returning to their conversations) adopt their cached prefixes
// again and again: each adoption swaps the slot's history into the entries, so a steady server
// makes no new KV cache (on CUDA one costs 64 address reservations) and frees none.
TEST_F(SchedulerTest, ReturningPromptsAdoptTheirCachesWithoutMakingNewOnes) {
  SchedulerOptions o;
  o.parallel = 2;
  o.ctx_size = 256;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  const int max_tokens = 4;
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 4; ++p) prompts.push_back(numbered_prompt(24, 100 + 37 * p));
  for (int round = 0; round < 3; ++round)
    for (const auto& prompt : prompts) serve_greedy(sched, prompt, max_tokens);
  const SchedulerStats s = sched.stats();
  EXPECT_GE(s.prefix_hits_cached, 4) << "the later rounds adopt the earlier rounds' caches";
  EXPECT_EQ(s.kv_caches_made, 0);
  EXPECT_EQ(s.requests_failed, 0);
  sched.stop();
  EXPECT_EQ(sched.stats().kv_blocks_used, 0);
}

// A long prompt arrives while another request decodes. Returns how many of the running
// request's tokens came out while the long prompt was being computed (the steps from the one
// that computed its first chunk to the one that computed its last that also carried a decode
// token: the running request is the only one decoding then), and checks both answers equal cold
// runs and that no more prompt tokens than the budget were computed between two of the running
// request's tokens (in the step carrying its token and the prompt-only steps before it).
static int64_t decode_tokens_during_long_prefill(int64_t step_prompt_tokens, int64_t long_prompt,
                                                 int64_t batch_tokens = 512) {
  SchedulerOptions o;
  o.parallel = 2;
  o.ctx_size = 1024;
  o.batch_tokens = batch_tokens;
  o.step_prompt_tokens = step_prompt_tokens;
  std::vector<StepRecord> steps;  // appended on the scheduler thread, read after stop()
  o.on_step = [&steps](const StepRecord& r) { steps.push_back(r); };
  Scheduler sched(SchedulerTest::engine_, o);
  EXPECT_TRUE(sched.start().is_ok());
  const auto running_prompt = numbered_prompt(12, 21);
  auto running = SchedulerTest::job(running_prompt, 96);
  EXPECT_EQ(sched.submit(running), Scheduler::Submit::kOk);
  std::string text;
  while (text.empty() && !running->wait_text(50ms, &text)) {
  }
  const auto long_ids = numbered_prompt(int(long_prompt), 22);
  auto arriving = SchedulerTest::job(long_ids, 4);
  EXPECT_EQ(sched.submit(arriving), Scheduler::Submit::kOk);
  SchedulerTest::finish(*arriving);
  SchedulerTest::finish(*running);
  sched.stop();
  EXPECT_EQ(running->output_tokens(), SchedulerTest::cold_greedy(running_prompt, 96, o.ctx_size));
  EXPECT_EQ(arriving->output_tokens(), SchedulerTest::cold_greedy(long_ids, 4, o.ctx_size));

  // Prompt tokens computed so far, step by step: the running request's own prompt comes first.
  int64_t computed = 0, decode_tokens = 0, paused = 0;
  bool started = false, done = false;
  for (size_t i = 0; i < steps.size() && !done; ++i) {
    const StepRecord& r = steps[i];
    const int64_t decoding = r.tokens - r.prompt_tokens;
    // (The running request's own prompt is computed before any of the long one's.)
    const bool long_prompts = computed >= int64_t(running_prompt.size());
    computed += r.prompt_tokens;
    EXPECT_LE(r.tokens, batch_tokens) << "step " << i;
    if (decoding == 0 && long_prompts) paused += r.prompt_tokens;
    if (step_prompt_tokens > 0 && decoding > 0) {
      EXPECT_LE(paused + r.prompt_tokens, step_prompt_tokens) << "step " << i;
      paused = 0;
    }
    started = started || computed > int64_t(running_prompt.size());
    done = computed >= int64_t(running_prompt.size()) + long_prompt;
    if (started && decoding > 0) ++decode_tokens;
  }
  EXPECT_TRUE(started && done) << "the long prompt was not computed";
  return decode_tokens;
}

// The per-step prompt budget: a 256-token prompt arriving while another request decodes is
// computed 32 tokens a step, each step also carrying the running request's next token, so that
// request's stream pauses for a 32-token chunk at a time. Without the budget (0: a whole
// --batch-tokens pass) the prompt takes one step, during which the running stream waits for
// all 256 tokens.
TEST_F(SchedulerTest, ALongPromptIsChunkedBetweenARunningRequestsTokens) {
  EXPECT_GE(decode_tokens_during_long_prefill(32, 256), 256 / 32);
  EXPECT_EQ(decode_tokens_during_long_prefill(0, 256), 1);
}

// A budget above one pass (--step-prompt-tokens 256 with 64-token passes): the 600-token prompt
// is computed in passes of prompt tokens alone, the running stream taking one token after every
// 256 of them (three gaps), where a budget of one pass gives it a token every 63.
TEST_F(SchedulerTest, ABudgetAboveOnePassRunsPromptOnlyPassesBetweenTokens) {
  const int64_t spanning = decode_tokens_during_long_prefill(256, 600, 64);
  EXPECT_GE(spanning, 2);
  EXPECT_LE(spanning, 4);
  EXPECT_GE(decode_tokens_during_long_prefill(64, 600, 64), 600 / 63);
}

TEST_F(SchedulerTest, APromptLargerThanThePoolIsAnErrorNotAWait) {
  SchedulerOptions o;
  o.parallel = 1;
  o.ctx_size = 512;
  o.kv_pool_tokens = 32;
  Scheduler sched(engine_, o);
  ASSERT_TRUE(sched.start().is_ok());
  auto big = job(numbered_prompt(200, 3), 4);
  ASSERT_EQ(sched.submit(big), Scheduler::Submit::kOk);
  finish(*big);
  EXPECT_EQ(big->finish_reason(), "error");
  EXPECT_NE(big->error().find("KV pool"), std::string::npos) << big->error();
  auto small = job(numbered_prompt(8, 4), 4);  // the scheduler still serves what fits
  ASSERT_EQ(sched.submit(small), Scheduler::Submit::kOk);
  finish(*small);
  EXPECT_EQ(small->finish_reason(), "length");
}

}  // namespace
}  // namespace hearth
