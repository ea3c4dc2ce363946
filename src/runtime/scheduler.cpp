// The scheduler thread: admission (prefix-matched slot choice, prefix copies between slots,
// several choices per request), one batched forward per step, sampling, stop strings,
// cancellation, and embeddings pooled from forward_hidden.
// A new per-step policy (priorities, preemption) belongs in take_admissible_locked(), place() or
// step().
#include "runtime/scheduler.h"

#include <algorithm>
#include <cmath>

#include "base/process-memory.h"
#include "base/timer.h"
#include "runtime/generation-step.h"
#include "runtime/scheduler-slot.h"
#include "runtime/stop-strings.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

using Clock = std::chrono::steady_clock;
// How long the scheduler stays idle before it trims the heap and the parked KV pages.
constexpr std::chrono::milliseconds kTrimAfterIdle{1000};

bool Job::wait_text(std::chrono::milliseconds timeout, std::string* text) {
  std::unique_lock<std::mutex> lock(mu_);
  if (pending_.empty() && !done_)
    cv_.wait_for(lock, timeout, [&] { return done_ || !pending_.empty(); });
  text->append(pending_);
  pending_.clear();
  return done_;
}

void Job::take_logprobs(std::vector<TokenLogprob>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  out->insert(out->end(), logprobs_.begin() + long(logprobs_taken_), logprobs_.end());
  logprobs_taken_ = logprobs_.size();
}

void Job::push_logprob(TokenLogprob lp) {
  std::lock_guard<std::mutex> lock(mu_);
  logprobs_.push_back(std::move(lp));
}

void Job::push_text(const std::string& text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ += text;
  }
  cv_.notify_all();
  notify(listener_);
}

void Job::notify(const JobNotifier::Call& call) {
  if (call && !(notifier_ && notifier_->post(call))) (*call)();
}

void Job::finish(const std::string& reason, const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    finish_reason_ = reason;
    error_ = error;
    done_ = true;
  }
  cv_.notify_all();
  // The last call: dropping the listener also drops what it holds (it may hold this job), where
  // the call runs.
  JobNotifier::Call listener = std::move(listener_);
  listener_ = nullptr;
  notify(listener);
}

// Copying a prefix from another slot costs a copy per layer and replaces the destination's own
// history; shorter matches (a BOS token, a template's first line) are cheaper to recompute.
constexpr size_t kMinCopiedPrefix = 16;

uint64_t choice_seed(uint64_t request_seed, int index) {
  if (index == 0 || request_seed == 0xFFFFFFFFull) return request_seed;
  uint64_t z = request_seed + uint64_t(index) * 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z == 0xFFFFFFFFull ? 0xFFFFFFFEull : z;  // never the "random" marker
}

// Embedding jobs run one chunk per step in their own pass (hidden states, not logits) over a
// scratch cache, so they interleave with decoding instead of stalling it.
struct Scheduler::EmbedState {
  KvCache kv;
  ForwardScratch scratch;
  std::deque<std::shared_ptr<Job>> jobs;
  size_t input = 0;   // index into jobs.front()->inputs
  size_t offset = 0;  // tokens of that input already pooled
  std::vector<double> sum;
};

Scheduler::Scheduler(std::shared_ptr<const Engine> engine, SchedulerOptions options)
    : engine_(std::move(engine)), options_(options) {}

Scheduler::~Scheduler() {
  stop();
}

Status Scheduler::start() {
  if (options_.parallel < 1) return Status::error("--parallel must be at least 1");
  if (options_.ctx_size < 2) return Status::error("--ctx-size must be at least 2");
  const Model& model = engine_->model();
  const int64_t pool_tokens = options_.kv_pool_tokens > 0
                                  ? options_.kv_pool_tokens
                                  : int64_t(options_.parallel) * options_.ctx_size;
  pool_ = model.kv_pool(pool_tokens, options_.kv_types);
  uint64_t committed = 0;
  for (int i = 0; i < options_.parallel; ++i) {
    auto slot = std::make_unique<Slot>();
    HEARTH_ASSIGN_OR_RETURN(slot->kv,
                            model.new_kv_cache(options_.ctx_size, options_.kv_types, pool_));
    committed += slot->kv.committed_bytes();
    slots_.push_back(std::move(slot));
  }
  // Spares for stashing, made now: not as requests are placed, nor while idle (see make_spare).
  while (make_spare()) {
  }
  HEARTH_TRY(warm_up());
  // Embeddings run in their own cache, outside the slots' pool (they cannot be preempted), and
  // commit only what their inputs use.
  embed_ = std::make_unique<EmbedState>();
  HEARTH_ASSIGN_OR_RETURN(embed_->kv,
                          model.new_kv_cache(options_.ctx_size, options_.kv_types,
                                             model.kv_pool(KvPool::kUnbounded, options_.kv_types)));
  {
    std::lock_guard<std::mutex> lock(mu_);
    totals_.slots_total = options_.parallel;
    totals_.kv_capacity = int64_t(options_.parallel) * options_.ctx_size;
    totals_.kv_bytes = committed;
    totals_.kv_pool_tokens = pool_tokens;
    totals_.kv_block_tokens = pool_->block_tokens();
    totals_.kv_blocks_total = pool_->total_blocks();
  }
  started_ = Clock::now();
  notifier_.start();
  thread_ = std::thread([this] { loop(); });
  return Status::ok();
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  notifier_.stop();  // the listeners queued so far run; the ones below run here
  slots_.clear();    // every cache gives its blocks back to the pool
  cached_.clear();
  spare_kv_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& group : queue_)
    for (auto& job : group) job->finish("cancelled", "the server is shutting down");
  queue_.clear();
}

Scheduler::Submit Scheduler::submit(const std::shared_ptr<Job>& job) {
  return submit_choices({job});
}

Scheduler::Submit Scheduler::submit_choices(const std::vector<std::shared_ptr<Job>>& choices) {
  if (choices.empty() || int(choices.size()) > options_.parallel) return Submit::kInvalidChoices;
  for (const auto& job : choices)
    if (job->kind != choices[0]->kind || job->prompt != choices[0]->prompt ||
        (job->kind == Job::Kind::kEmbed && choices.size() > 1))
      return Submit::kInvalidChoices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stopping_) return Submit::kDraining;
    // A free slot takes the job at once, so only requests beyond the slots count as queued.
    const int free_slots = options_.parallel - running_;
    if (int(queue_.size()) - std::max(free_slots, 0) >= options_.max_queue)
      return Submit::kQueueFull;
    for (const auto& job : choices) job->notifier_ = &notifier_;
    queue_.push_back(choices);
    if (choices[0]->kind == Job::Kind::kGenerate)
      totals_.prompt_tokens += int64_t(choices[0]->prompt.size());
  }
  cv_.notify_all();
  return Submit::kOk;
}

void Scheduler::begin_drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool Scheduler::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return queue_.empty() && running_ == 0; });
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = totals_;
  s.queue_depth = int(queue_.size());
  s.kv_blocks_used = pool_ ? pool_->used_blocks() : 0;
  int64_t recent = 0;
  for (const auto& r : recent_) recent += r.second;
  s.gen_tok_s_10s = double(recent) / 10.0;
  return s;
}

static size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Takes the queued requests that fit the free slots now, oldest first; an embedding job goes to
// its own pipeline. A request of n choices waits until n slots are free, and so does everything
// queued behind it. Slots are only assigned by place(), outside the lock: a prefix copy may take
// a while and submit() and stats() must not wait for it.
std::vector<Scheduler::Group> Scheduler::take_admissible_locked(std::vector<Group>* too_large) {
  std::vector<Group> out;
  int free_slots = 0;
  for (auto& s : slots_) free_slots += s->job ? 0 : 1;
  while (!queue_.empty()) {
    Group& group = queue_.front();
    if (group[0]->kind == Job::Kind::kEmbed) {
      embed_->jobs.push_back(group[0]);
      ++running_;
      queue_.pop_front();
      continue;
    }
    if (int(group.size()) > free_slots) break;
    if (never_fits(group)) {  // not even in an empty pool: answered with an error
      running_ += int(group.size());
      too_large->push_back(std::move(group));
      queue_.pop_front();
      continue;
    }
    if (!fits_locked(group)) break;
    free_slots -= int(group.size());
    running_ += int(group.size());
    out.push_back(std::move(group));
    queue_.pop_front();
  }
  return out;
}

void Scheduler::init_slot(Slot& slot, const std::shared_ptr<Job>& job, size_t keep) {
  slot.history.resize(keep);
  slot.kv.set_used(int64_t(keep));
  slot.kv.release_unused();  // blocks past the reused prefix go back to the pool
  slot.job = job;
  slot.prompt_done = keep;
  slot.pending = -1;
  slot.leader = nullptr;
  if (auto resume = std::move(job->resume_)) {  // a preempted job continues where it was
    slot.feed = std::move(resume->feed);
    slot.step = std::move(resume->step);
    slot.generated = resume->generated;
    slot.last_used = resume->admitted;
    return;
  }
  slot.feed = job->prompt;
  slot.generated = 0;
  slot.last_used = ++clock_;
  slot.step = std::make_unique<GenerationStep>(engine_->tokenizer(), job->generate);
  job->prompt_tokens_ = int64_t(job->prompt.size());
  job->cached_tokens_ = int64_t(keep);
  job->timing_.started = Clock::now();
}

// Places a request's first (or only) job. It goes to the free slot whose history shares the
// longest usable prefix with its prompt (a conversation's next turn lands where its previous
// turn left its cache); ties go to the least recently used slot, so other histories survive
// longer. When another slot, busy or not, holds a longer prefix of the prompt (a system prompt
// many users share), that prefix is copied into the chosen slot instead of being recomputed.
Scheduler::Slot& Scheduler::place_first(const std::shared_ptr<Job>& job) {
  // Always recompute at least the last prompt token: its logits pick the first new token.
  // (a sliding-window layer's ring may no longer hold what a longer rewind would need)
  const std::vector<int32_t>& feed = job->resume_ ? job->resume_->feed : job->prompt;
  const bool resumed = job->resume_ != nullptr;
  const size_t limit = feed.size() - 1;
  auto usable = [&](const Slot& s) {
    const size_t len = std::min(common_prefix(s.history, feed), limit);
    return size_t(s.kv.reusable_prefix(int64_t(len)));
  };
  Slot* best = nullptr;
  size_t best_len = 0;
  for (auto& s : slots_) {
    if (s->job) continue;
    const size_t len = usable(*s);
    if (!best || len > best_len || (len == best_len && s->last_used < best->last_used)) {
      best = s.get();
      best_len = len;
    }
  }
  Slot* source = nullptr;
  size_t source_len = 0;
  for (auto& s : slots_) {
    if (s.get() == best) continue;
    const size_t len = usable(*s);
    if (len > source_len) {
      source = s.get();
      source_len = len;
    }
  }
  size_t cached_len = 0;
  CachedPrefix* cached = best_cached_prefix(feed, limit, &cached_len);
  Slot& slot = *best;
  if (cached && cached_len > best_len && cached_len >= source_len) {
    adopt(slot, cached);
    if (!resumed) count_prefix_reuse(0, 0, int64_t(cached_len));
    init_slot(slot, job, cached_len);
    return slot;
  }
  const bool copy = source && source_len >= best_len + kMinCopiedPrefix;
  if (copy || best_len < kMinCopiedPrefix) {
    stash(slot);  // its history is not what this request reuses: keep it as an entry
    best_len = 0;
  }
  if (copy) {
    slot.kv.set_used(0);
    slot.kv.release_unused();
    Status st = slot.kv.copy_prefix_from(source->kv, int64_t(source_len));
    // A full pool: older cached prefixes make room for this one.
    while (!st.is_ok() && evict_lru_prefix(&slot, source))
      st = slot.kv.copy_prefix_from(source->kv, int64_t(source_len));
    if (st.is_ok()) {
      slot.history.assign(feed.begin(), feed.begin() + long(source_len));
      if (!resumed) count_prefix_reuse(0, int64_t(source_len));
      init_slot(slot, job, source_len);
      return slot;
    }
    // Not expected (the caches share one shape); the prompt is then computed as if cold.
    best_len = 0;
  }
  if (!resumed) count_prefix_reuse(int64_t(best_len), 0);
  init_slot(slot, job, best_len);
  return slot;
}

// Gives a request's jobs their slots (take_admissible_locked() reserved enough). Later choices
// take the least recently used free slots, whose caches matter least: they are overwritten by
// the copy of the first choice's prompt.
void Scheduler::place(const Group& group) {
  Slot& first = place_first(group[0]);
  for (size_t i = 1; i < group.size(); ++i) {
    Slot* slot = nullptr;
    for (auto& s : slots_)
      if (!s->job && (!slot || s->last_used < slot->last_used)) slot = s.get();
    init_slot(*slot, group[i], 0);
    slot->leader = &first;
  }
}

void Scheduler::count_prefix_reuse(int64_t same_slot, int64_t copied, int64_t cached) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_.prefix_hits_cached += cached > 0 ? 1 : 0;
  totals_.prefix_tokens_cached += cached;
  totals_.prefix_hits_same_slot += same_slot > 0 ? 1 : 0;
  totals_.prefix_tokens_same_slot += same_slot;
  totals_.prefix_hits_copied += copied > 0 ? 1 : 0;
  totals_.prefix_tokens_copied += copied;
}

void Scheduler::finish_slot(Slot& slot, const std::string& reason, const std::string& error) {
  auto job = std::move(slot.job);
  slot.job.reset();
  slot.pending = -1;
  slot.leader = nullptr;
  slot.kv.release_unused();  // the history stays cached; blocks past it go back
  // Whatever the decoder or stop filter held back is part of the answer (not after a stop).
  if (slot.step && reason != "error" && reason != "cancelled") job->push_text(slot.step->flush());
  job->completion_tokens_ = slot.generated;
  job->timing_.finished = Clock::now();
  if (slot.generated == 0 && job->timing_.first_token == Clock::time_point{})
    job->timing_.first_token = job->timing_.finished;
  finish_job(*job, reason, error);
  // Choices still waiting for this slot's prompt (it failed or was cancelled before the prompt
  // was complete) end the same way.
  for (auto& f : slots_)
    if (f->leader == &slot) finish_slot(*f, reason, error);
}

void Scheduler::finish_job(Job& job, const std::string& reason, const std::string& error) {
  // The count drops before the client can hear the answer: a client that sends its next request
  // as soon as this one ends must find the slot free, not queue-full.
  bool idle = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    if (reason == "cancelled")
      totals_.requests_cancelled++;
    else if (reason == "error")
      totals_.requests_failed++;
    else
      totals_.requests_finished++;
    idle = queue_.empty() && running_ == 0;
  }
  job.finish(reason, error);
  if (idle) idle_cv_.notify_all();  // after the answer is out: a drain waits for it
}

void Scheduler::drop_cancelled() {
  for (auto& s : slots_)
    if (s->job && s->job->cancelled()) finish_slot(*s, "cancelled");
  std::lock_guard<std::mutex> lock(mu_);
  // A queued request leaves when any of its choices was cancelled (they share one client).
  for (auto it = queue_.begin(); it != queue_.end();) {
    const bool cancelled =
        std::any_of(it->begin(), it->end(), [](const auto& job) { return job->cancelled(); });
    if (cancelled) {
      for (auto& job : *it) {
        job->finish("cancelled");
        totals_.requests_cancelled++;
      }
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

void Scheduler::embed_step() {
  EmbedState& e = *embed_;
  if (e.jobs.empty()) return;
  auto job = e.jobs.front();
  const int64_t E = engine_->model().hparams().n_embd;
  auto done_job = [&](const std::string& reason, const std::string& error) {
    e.jobs.pop_front();
    e.input = 0;
    e.offset = 0;
    e.sum.clear();
    e.kv.set_used(0);
    e.kv.release_unused();  // its memory goes back between jobs
    finish_job(*job, reason, error);
  };
  if (job->cancelled()) return done_job("cancelled", "");
  const auto& input = job->inputs[e.input];
  if (e.offset == 0) {
    e.kv.set_used(0);
    e.sum.assign(size_t(E), 0.0);
  }
  // A chunk shares the core with running streams' steps: while any decodes, it is held to the
  // per-step prompt budget too.
  bool decoding = false;
  for (auto& s : slots_) decoding = decoding || (s->job && s->pending >= 0);
  const int64_t cap = decoding && options_.step_prompt_tokens > 0
                          ? std::min(options_.step_prompt_tokens, options_.batch_tokens)
                          : options_.batch_tokens;
  const size_t n = std::min(input.size() - e.offset, size_t(cap));
  std::vector<int32_t> chunk(input.begin() + long(e.offset), input.begin() + long(e.offset + n));
  std::vector<float> hidden;
  BatchSegment seg{&e.kv, int64_t(e.offset), int64_t(n), /*all_logits=*/true};
  const Status st = engine_->model().forward_hidden(chunk, {seg}, e.scratch, &hidden);
  if (!st.is_ok()) return done_job("error", st.message());
  for (size_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < E; ++c) e.sum[size_t(c)] += hidden[r * size_t(E) + size_t(c)];
  e.offset += n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    totals_.embedded_tokens += int64_t(n);
  }
  if (e.offset < input.size()) return;
  // Mean pooling, then L2 normalization (cosine similarity becomes a dot product).
  std::vector<float> v(static_cast<size_t>(E));
  double norm = 0;
  for (int64_t c = 0; c < E; ++c) {
    const double m = e.sum[size_t(c)] / double(input.size());
    v[size_t(c)] = float(m);
    norm += m * m;
  }
  norm = std::sqrt(norm);
  if (norm > 0)
    for (float& x : v) x = float(x / norm);
  job->embeddings_.push_back(std::move(v));
  job->prompt_tokens_ += int64_t(input.size());
  e.offset = 0;
  if (++e.input == job->inputs.size()) done_job("stop", "");
}

void Scheduler::loop() {
  bool worked_since_trim = false;
  while (true) {
    std::vector<Group> admitted, too_large;
    bool stop_now = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      admitted = take_admissible_locked(&too_large);
      const bool busy = running_ > 0;
      stop_now = stopping_;
      if (stop_now) {
        // fall through: what was taken gets its slots, then every slot's job is cancelled
      } else if (!busy && worked_since_trim) {
        // Idle after a burst: once nothing has come for kTrimAfterIdle, what the burst freed
        // goes back to the kernel, so RSS between bursts is what the server holds, not what it
        // once needed (the heap, and the KV pages the backends kept parked for the next
        // request). Not at once: a client's next request often comes within milliseconds (a
        // load's next round, an agent's next call), and each then regrew the heap and faulted
        // its KV pages in again.
        if (cv_.wait_for(lock, kTrimAfterIdle, [&] { return stopping_ || !queue_.empty(); }))
          continue;
        lock.unlock();
        release_free_heap_memory();
        for (const LayerGroup& g : engine_->model().groups()) g.backend->release_parked_kv();
        worked_since_trim = false;
        continue;
      } else if (!busy) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        continue;
      }
    }
    for (const Group& group : too_large)
      for (const auto& job : group)
        finish_job(*job, "error",
                   "the KV pool holds " +
                       std::to_string(pool_->total_blocks() * pool_->block_tokens()) +
                       " tokens, fewer than this request's prompt needs (--kv-pool-tokens)");
    Timer place_timer;
    for (const Group& group : admitted) place(group);
    const double placed = admitted.empty() ? 0.0 : place_timer.elapsed_ms() / 1000.0;
    if (stop_now) break;
    worked_since_trim = true;
    drop_cancelled();
    StepRecord record;
    record.start_seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    Timer step_timer;
    step(&record);
    const double stepped = step_timer.elapsed_ms() / 1000.0;
    if (options_.on_step && record.tokens > 0) {
      record.step_ms = stepped * 1000.0;
      options_.on_step(record);
    }
    embed_step();
    notifier_.flush();  // this step's text and endings, one wake-up
    int busy = 0;
    int64_t used = 0;
    uint64_t committed = 0;
    for (auto& s : slots_) {
      busy += s->job ? 1 : 0;
      used += int64_t(s->history.size());  // idle slots keep their cache for prefix reuse
      committed += s->kv.committed_bytes();
    }
    for (auto& c : cached_) {
      used += int64_t(c->tokens.size());
      committed += c->kv.committed_bytes();
    }
    std::lock_guard<std::mutex> lock(mu_);
    totals_.place_seconds += placed;
    totals_.step_seconds += stepped;
    totals_.slots_busy = busy;
    totals_.kv_used = used;
    totals_.kv_bytes = committed;
  }
  for (auto& s : slots_)
    if (s->job) finish_slot(*s, "cancelled", "the server is shutting down");
  while (!embed_->jobs.empty()) {
    embed_->jobs.front()->finish("cancelled", "the server is shutting down");
    embed_->jobs.pop_front();
  }
}

}  // namespace hearth
