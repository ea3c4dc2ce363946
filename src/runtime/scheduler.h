// Continuous batching, which `hearth serve` drives (no HTTP here): one scheduler thread owns N
// slots (each a KV cache of ctx_size positions) and, every step, runs all active slots' decode
// tokens plus chunks of pending prompts through ONE Model::forward call. Jobs come in through a
// bounded queue; HTTP threads read their streamed text from the Job. A prompt prefix another
// slot already computed is copied (KvCache::copy_prefix_from), not recomputed; a request with
// several choices prefills its prompt once and copies it into its sibling slots.
// The slots' caches draw from one KvPool (kv/kv-pool.h) of --kv-pool-tokens positions: a request
// is admitted when its prompt's blocks fit; a sequence that needs a block of a full pool first
// evicts idle slots' cached prefixes (least recently used first), then preempts the most
// recently admitted running sequence, which goes back to the queue's front and later recomputes
// its prompt and the tokens it had generated, then continues (scheduler-kv.cpp).
// New kinds of work = a new Job::Kind handled in step().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "runtime/engine.h"
#include "runtime/job-notifier.h"
#include "runtime/session.h"
#include "runtime/token-logprobs.h"
#include "sampling/sampler.h"
#include "sampling/token-constraint.h"

namespace hearth {

// One request's work and its output channel. The HTTP thread fills the inputs, submits the job
// and then only calls wait_text()/cancel()/the accessors; the scheduler thread produces.
class Job {
 public:
  enum class Kind { kGenerate, kEmbed };
  Kind kind = Kind::kGenerate;

  // Inputs (set before submit, then read-only).
  std::vector<int32_t> prompt;               // kGenerate
  std::vector<std::vector<int32_t>> inputs;  // kEmbed: one pooled vector per input
  // kGenerate: max_tokens (> 0, checked against the context), ignore_eos, stop strings, the
  // sampling chain, OpenAI's logit_bias and the structured-output constraint (this job's own
  // state), as every generate loop takes them (runtime/generation-step.h). logprobs stay the
  // model's own: bias and mask apply to a copy.
  GenerateOptions generate;
  // -1: no logprobs; 0..N (the API caps N): each generated token's logprob and that many of the
  // most likely alternatives.
  int32_t logprobs_top = -1;

  // Consumer side. Waits up to `timeout` for text or the end; appends new text to *text.
  // Returns true once the job has finished and all its text was handed out.
  bool wait_text(std::chrono::milliseconds timeout, std::string* text);
  // Appends the logprobs produced since the last call (a stream sends them with their text; they
  // are pushed before the token's text, so a chunk never carries text without its tokens').
  void take_logprobs(std::vector<TokenLogprob>* out);
  // Called after new text or the end is available, so an event-driven consumer needs no thread
  // blocked in wait_text(): on the scheduler's notifier thread (runtime/job-notifier.h) for a
  // submitted job, in the order the text came. Set before submit(); keep it short.
  void set_listener(std::function<void()> listener) {
    listener_ =
        listener ? std::make_shared<const std::function<void()>>(std::move(listener)) : nullptr;
  }
  // The client went away: the scheduler drops the job at its next step and frees the slot.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Results, valid once wait_text() returned true.
  const std::string& finish_reason() const { return finish_reason_; }  // stop, length, error, ...
  const std::string& error() const { return error_; }  // set when finish_reason is "error"
  int64_t prompt_tokens() const { return prompt_tokens_; }
  // Prompt tokens not computed for this job: reused from its slot's cache or copied from another
  // slot's. The later choices of a request report the first one's count.
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  const std::vector<std::vector<float>>& embeddings() const { return embeddings_; }
  // The generated token ids (the end-of-generation token excluded), for clients that continue
  // from them (Ollama's `context`).
  const std::vector<int32_t>& output_tokens() const { return output_tokens_; }
  // Every generated token's logprobs (when logprobs_top >= 0), once finished.
  const std::vector<TokenLogprob>& logprobs() const { return logprobs_; }
  // When the scheduler took the job into a slot, sampled its first token, and finished it (for
  // Ollama's prompt_eval/eval durations). A job that never ran keeps the epoch.
  struct Timing {
    std::chrono::steady_clock::time_point started, first_token, finished;
  };
  const Timing& timing() const { return timing_; }

  // Producer side (scheduler thread only).
  void push_text(const std::string& text);
  void push_logprob(TokenLogprob lp);
  void finish(const std::string& reason, const std::string& error = "");

 private:
  friend class Scheduler;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  bool done_ = false;
  std::atomic<bool> cancelled_{false};
  JobNotifier::Call listener_;
  JobNotifier* notifier_ = nullptr;  // the scheduler's, once submitted
  void notify(const JobNotifier::Call& call);
  std::string finish_reason_, error_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  std::vector<std::vector<float>> embeddings_;
  std::vector<int32_t> output_tokens_;
  std::vector<TokenLogprob> logprobs_;  // guarded by mu_ until done
  size_t logprobs_taken_ = 0;
  Timing timing_;
  // Set while the job waits in the queue after a preemption (scheduler thread only): what its
  // slot must recompute and the generation state it continues with.
  struct Resume;
  std::shared_ptr<Resume> resume_;
};

// One batched step as the scheduler ran it, for `hearth serve --step-log`: what a served load's
// time went to (prompt chunks against decode tokens), which the totals in /metrics blur.
struct StepRecord {
  double start_seconds = 0;  // since the scheduler started
  int segments = 0;          // sequences in the pass
  int64_t tokens = 0;        // tokens in the pass (decode tokens + prompt chunks)
  int64_t prompt_tokens = 0;
  int64_t sampled = 0;       // tokens picked (decode rows and finished prompts)
  int64_t device_picks = 0;  // of which picked where the logits are (only ids read back)
  int64_t passes = 1;        // forward passes: > 1 for a single stream's chained steps
  double prepare_ms = 0;     // choosing the pass's tokens and giving them KV blocks
  double forward_ms = 0;     // the forward pass with its picks
  double step_ms = 0;        // the whole step: forward, host picks, streaming, block commits
};

struct SchedulerOptions {
  int parallel = 4;         // slots (sequences decoded together)
  int64_t ctx_size = 2048;  // positions per slot (a sequence's limit)
  KvCacheTypes kv_types;    // each slot's KV cache element types (--cache-type-k/-v)
  // Positions of the KV pool all slots share (--kv-pool-tokens); 0: parallel * ctx_size, the
  // memory every slot's full context took before, now committed only as it is used.
  int64_t kv_pool_tokens = 0;
  int max_queue = 64;          // jobs waiting for a slot before submit() says kQueueFull
  int64_t batch_tokens = 512;  // tokens per forward pass (decode tokens first, then prompt chunks)
  // Prompt tokens computed between two tokens of a running sequence (--step-prompt-tokens): a
  // long prompt is prefilled in chunks of this size, each sharing a forward pass with every
  // running sequence's next token, so those streams pause for a chunk's compute, not the whole
  // prompt's. Above batch_tokens the chunk spans several passes: while more prompt tokens wait
  // than the next shared pass can take, passes of prompts alone run first (the running streams
  // wait for all of them at once: one long gap instead of a slow token per pass). A step with
  // no decoding sequence takes up to batch_tokens. 0: batch_tokens always.
  int64_t step_prompt_tokens = 128;
  // A pass run by start() before any request, shaped like the largest step the server runs (a
  // prompt chunk of up to this many tokens among one-token rows of every other slot, then every
  // slot decoding): a GPU's first pass of a shape sizes its scratch buffers (each growth waits
  // for the device) and sets up its libraries, 30-130 ms a step that the first requests paid.
  // 0: none (--no-warmup).
  int64_t warm_up_tokens = 0;
  // Called on the scheduler thread after each batched step (keep it short: the next step waits).
  std::function<void(const StepRecord&)> on_step;
};

// Counters for /metrics and /health. Totals are since start. A request's prompt counts once
// however many choices it has (its siblings get the computed prompt by copy).
struct SchedulerStats {
  int64_t prompt_tokens = 0;     // prompt tokens of finished and running requests
  int64_t prompt_evaluated = 0;  // of which computed (the rest reused a cached prefix)
  // The prefix cache: requests that reused a prefix their slot held (same slot) or that was
  // copied from another slot's cache, and the prompt tokens each way saved.
  int64_t prefix_hits_same_slot = 0;
  int64_t prefix_hits_copied = 0;
  // ... and those that adopted a finished request's cache kept beyond the slots (cached).
  int64_t prefix_hits_cached = 0;
  int64_t prefix_tokens_cached = 0;
  int64_t prefix_tokens_same_slot = 0;
  int64_t prefix_tokens_copied = 0;
  int64_t generated_tokens = 0;
  int64_t embedded_tokens = 0;
  int64_t requests_finished = 0;
  int64_t requests_cancelled = 0;
  int64_t requests_failed = 0;
  int64_t steps = 0;
  double forward_seconds = 0;
  // The scheduler thread's time: steps whole (forward, sampling, streaming, block commits) and
  // placing admitted requests (slot choice, prefix copies); the rest of a busy server's wall
  // time is the thread waiting or admitting.
  double step_seconds = 0;
  double place_seconds = 0;
  double gen_tok_s_10s = 0;  // generated tokens per second over the last 10 s
  int queue_depth = 0;
  int slots_busy = 0;
  int slots_total = 0;
  int64_t kv_used = 0;      // positions holding valid entries, all slots
  int64_t kv_capacity = 0;  // slots * ctx_size
  uint64_t kv_bytes = 0;    // KV memory committed now (the pool's blocks and sliding rings)
  // The KV pool: its blocks (of kv_block_tokens positions), those held by sequences and cached
  // prefixes, cached prefixes dropped to make room and running sequences preempted to
  // recompute later.
  int64_t kv_pool_tokens = 0;
  int64_t kv_block_tokens = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t prefix_evictions = 0;
  int64_t preemptions = 0;
  // KV caches made after start (a stash that found no spare); a steady server makes none.
  int64_t kv_caches_made = 0;
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const Engine> engine, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;

  Status start();  // allocates the slots' caches and starts the thread
  void stop();     // finishes every remaining job with "cancelled" and joins the thread

  // kInvalidChoices: submit_choices() got no job, more jobs than slots, or jobs whose prompts
  // differ (the caller checks the first against SchedulerOptions::parallel to say so).
  enum class Submit { kOk, kQueueFull, kDraining, kInvalidChoices };
  Submit submit(const std::shared_ptr<Job>& job);
  // The choices of one request (OpenAI's `n`): jobs with the same prompt, each with its own
  // sampling (seeds from choice_seed) and output. They wait in the queue as one entry until that
  // many slots are free (entries behind them wait too, so a large request is not starved), the
  // prompt is prefilled once in the first job's slot, and its KV rows are copied into the
  // others' when it completes; each then samples its first token from the same logits.
  Submit submit_choices(const std::vector<std::shared_ptr<Job>>& choices);
  // Refuse new jobs from now on (graceful shutdown); running and queued ones still finish.
  void begin_drain();
  // Waits until no job is queued or running, at most `timeout`. True when idle.
  bool wait_idle(std::chrono::milliseconds timeout);

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Slot;
  struct EmbedState;
  struct CachedPrefix;
  using Group = std::vector<std::shared_ptr<Job>>;  // one request's jobs (choices)
  void loop();
  std::vector<Group> take_admissible_locked(std::vector<Group>* too_large);
  void place(const Group& group);
  Slot& place_first(const std::shared_ptr<Job>& job);
  void init_slot(Slot& slot, const std::shared_ptr<Job>& job, size_t keep);
  void start_followers(Slot& leader, const float* logits);
  void drop_cancelled();
  // One batched step; fills *record's counts and forward time when it ran a pass.
  void step(StepRecord* record);
  void embed_step();
  void finish_slot(Slot& slot, const std::string& reason, const std::string& error = "");
  void finish_job(Job& job, const std::string& reason, const std::string& error);
  enum class DevicePick { kNone, kArgmax, kDraw };
  DevicePick device_pick(const Slot& slot) const;
  void sample_and_emit(Slot& slot, const float* logits, int32_t picked = -1);
  // sample_and_emit's token and text without finishing the slot: false when it must finish
  // (why in *finish), else the token is the slot's pending one.
  struct Finish {
    std::string reason, error;
  };
  bool emit_token(Slot& slot, const float* logits, int32_t picked, Finish* finish);
  // A batched step's pass (scheduler-step.cpp): the slots in `order` (admission order) take
  // one token each if decoding (none with only_prompts), then prompt chunks of at most
  // prompt_budget tokens together, all within batch_tokens and the pool (make_room).
  struct PassPlan;
  void plan_pass(const std::vector<Slot*>& order, int64_t decoding, int64_t prompt_budget,
                 bool only_prompts, PassPlan* plan);
  // One sequence alone decoding (nothing queued, no prompt to compute) on a backend that
  // chains: its next tokens from Model::decode_chained, a few steps queued ahead of the host
  // (scheduler-chain.cpp). False when the step is not that case (step() runs it).
  bool step_single_stream(StepRecord* record);
  // Adds a step's generated tokens to the 10-second window behind gen_tok_s_10s (mu_ held).
  void add_recent_locked(int64_t tokens);
  void count_prefix_reuse(int64_t same_slot, int64_t copied, int64_t cached = 0);
  // The KV pool (scheduler-kv.cpp). Blocks an admitted group needs for its prompts, and whether
  // they can be had now (free, or held by idle slots' cached prefixes).
  int64_t blocks_to_admit(const Group& group) const;
  bool fits_locked(const Group& group) const;
  bool never_fits(const Group& group) const;  // more than the whole pool
  int running_slots() const;
  // Makes `slot`'s cache hold `positions` positions: evicts cached prefixes, then preempts
  // running sequences admitted after it that are not in `in_step`. kWait: nothing more can be
  // freed for it now.
  enum class Room { kOk, kWait };
  Room make_room(Slot& slot, int64_t positions, const std::vector<Slot*>& in_step);
  // Drops the least recently used idle slot's cached prefix (not keep_a's or keep_b's); false
  // when there is none holding blocks.
  bool evict_lru_prefix(const Slot* keep_a, const Slot* keep_b = nullptr);
  void preempt(Slot& slot);
  void forget_cache(Slot& slot);
  // Cached prefixes beyond the slots: a slot about to be overwritten keeps its history as an
  // entry (its cache moves there, the slot gets a fresh one); a request adopts the entry with
  // the longest usable prefix of its feed (its cache moves back into the slot, no copy; the
  // slot's own history takes the entry's place, or its cache becomes a spare).
  void stash(Slot& slot);
  // Whether a slot's history is kept as an entry (long enough, and holding blocks), and keeping
  // it: the slot's cache and history move into a new entry (the bound is the caller's).
  bool history_worth_keeping(const Slot& slot) const;
  const CachedPrefix* keep_history(Slot& slot);
  CachedPrefix* best_cached_prefix(const std::vector<int32_t>& feed, size_t limit, size_t* len);
  void adopt(Slot& slot, CachedPrefix* entry);
  // Dropped entries' caches, emptied, are what stash hands out next: a cache's address
  // reservations (and on CUDA the granules parked in them) outlive its sequences, because
  // making and freeing them cost driver calls and a device sync per layer, per request.
  void drop_entry(std::vector<std::unique_ptr<CachedPrefix>>::iterator entry);
  // An unused cache, emptied, kept as a spare (while fewer than `parallel` are kept).
  void keep_spare(KvCache kv);
  Result<KvCache> spare_cache();
  // Makes one more spare cache if stashing could still need one (false when none is wanted,
  // making it failed, or its model's caches hold sliding rings: those commit memory). Called
  // at start: a 7B's cache on CUDA reserves 64 address ranges (~10 ms), which placing a request
  // used to wait for, and a request arriving while one is made idle waited too (H200: 16 ->
  // 34 ms to the first token).
  bool make_spare();
  // SchedulerOptions::warm_up_tokens: the passes, on the slots' caches, emptied afterwards.
  Status warm_up();

  std::shared_ptr<const Engine> engine_;
  SchedulerOptions options_;
  std::shared_ptr<KvPool> pool_;  // the slots' caches' blocks
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<CachedPrefix>> cached_;  // at most `parallel` entries
  std::vector<KvCache> spare_kv_;                      // at most `parallel`, holding no blocks
  std::unique_ptr<EmbedState> embed_;
  ForwardScratch scratch_;  // the batched pass's activations (scheduler thread only)
  // The step's logits, kept across steps: a fresh vector of B x n_vocab floats cost a page
  // fault per 4 KiB every step (scheduler thread only).
  std::vector<float> logits_;
  std::vector<int32_t> picked_;  // the step's picks on the backend, one per output row
  // Prompt tokens computed by prompt-only passes since the running sequences last took a token
  // (step_prompt_tokens above batch_tokens). Scheduler thread only.
  int64_t paused_prompt_tokens_ = 0;
  std::thread thread_;
  JobNotifier notifier_;  // runs the jobs' listeners off this thread, one wake-up a step

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable cv_, idle_cv_;
  std::deque<Group> queue_;
  bool stopping_ = false, draining_ = false;
  int running_ = 0;  // jobs in slots or the embedding pipeline
  SchedulerStats totals_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_;  // for tok/s
  uint64_t clock_ = 0;  // admission counter, for least-recently-used slot choice
  std::chrono::steady_clock::time_point started_;  // for StepRecord::start_seconds
};

// The seed of choice `index` of a request seeded with `request_seed`: choice 0 keeps the request's
// seed (an n = 1 answer is the same as before), choice i > 0 takes splitmix64 of seed + i, so
// choices are independent streams and a request's answers repeat for the same seed. The
// "random" seed 0xFFFFFFFF stays random for every choice.
uint64_t choice_seed(uint64_t request_seed, int index);

}  // namespace hearth
