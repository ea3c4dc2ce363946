// The scheduler thread: admission (prefix-matched slot choice), one batched forward per step,
// sampling, stop strings, cancellation, and embeddings pooled from forward_hidden.
// A new per-step policy (priorities, preemption) belongs in admit_locked() or step().
#include "runtime/scheduler.h"

#include <algorithm>
#include <cmath>

#include "base/process-memory.h"
#include "base/timer.h"
#include "runtime/generation-step.h"
#include "runtime/stop-strings.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

using Clock = std::chrono::steady_clock;

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
  if (listener_) listener_();
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
  // The last call: dropping the listener also drops what it holds (it may hold this job).
  auto listener = std::move(listener_);
  listener_ = nullptr;
  if (listener) listener();
}

// A sequence slot: its cache, the tokens whose entries the cache holds, and the job it runs.
struct Scheduler::Slot {
  KvCache kv;
  std::vector<int32_t> history;  // tokens at positions [0, history.size()) of kv
  std::shared_ptr<Job> job;
  size_t prompt_done = 0;  // prompt tokens in the cache (reused prefix included)
  int32_t pending = -1;    // sampled token not yet run through the model
  int32_t generated = 0;
  uint64_t last_used = 0;
  std::unique_ptr<GenerationStep> step;  // sampling, stops, streaming: the job's own
};

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
  for (int i = 0; i < options_.parallel; ++i) {
    auto slot = std::make_unique<Slot>();
    HEARTH_ASSIGN_OR_RETURN(slot->kv, model.new_kv_cache(options_.ctx_size, options_.kv_types));
    slots_.push_back(std::move(slot));
  }
  embed_ = std::make_unique<EmbedState>();
  HEARTH_ASSIGN_OR_RETURN(embed_->kv, model.new_kv_cache(options_.ctx_size, options_.kv_types));
  {
    std::lock_guard<std::mutex> lock(mu_);
    totals_.slots_total = options_.parallel;
    totals_.kv_capacity = int64_t(options_.parallel) * options_.ctx_size;
    totals_.kv_bytes = slots_[0]->kv.bytes() * uint64_t(options_.parallel);
  }
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
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& job : queue_) job->finish("cancelled", "the server is shutting down");
  queue_.clear();
}

Scheduler::Submit Scheduler::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stopping_) return Submit::kDraining;
    // A free slot takes the job at once, so only jobs beyond the slots count as queued.
    const int free_slots = options_.parallel - running_;
    if (int(queue_.size()) - std::max(free_slots, 0) >= options_.max_queue)
      return Submit::kQueueFull;
    queue_.push_back(job);
    if (job->kind == Job::Kind::kGenerate) totals_.prompt_tokens += int64_t(job->prompt.size());
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

// Moves queued jobs into free slots. A generation job goes to the free slot whose history shares
// the longest prefix with its prompt (a conversation's next turn lands where its previous turn
// left its cache); ties go to the least recently used slot, so other histories survive longer.
void Scheduler::admit_locked() {
  while (!queue_.empty()) {
    auto job = queue_.front();
    if (job->kind == Job::Kind::kEmbed) {
      queue_.pop_front();
      embed_->jobs.push_back(job);
      ++running_;
      continue;
    }
    Slot* best = nullptr;
    size_t best_len = 0;
    for (auto& s : slots_) {
      if (s->job) continue;
      const size_t len = common_prefix(s->history, job->prompt);
      if (!best || len > best_len || (len == best_len && s->last_used < best->last_used)) {
        best = s.get();
        best_len = len;
      }
    }
    if (!best) return;
    queue_.pop_front();
    ++running_;
    Slot& slot = *best;
    // Always recompute at least the last prompt token: its logits pick the first new token.
    // (a sliding-window layer's ring may no longer hold what a longer rewind would need)
    const size_t keep =
        size_t(best->kv.reusable_prefix(int64_t(std::min(best_len, job->prompt.size() - 1))));
    slot.history.resize(keep);
    slot.kv.set_used(int64_t(keep));
    slot.job = job;
    slot.prompt_done = keep;
    slot.pending = -1;
    slot.generated = 0;
    slot.last_used = ++clock_;
    slot.step = std::make_unique<GenerationStep>(engine_->tokenizer(), job->generate);
    job->prompt_tokens_ = int64_t(job->prompt.size());
    job->cached_tokens_ = int64_t(keep);
    job->timing_.started = Clock::now();
  }
}

void Scheduler::finish_slot(Slot& slot, const std::string& reason, const std::string& error) {
  auto job = std::move(slot.job);
  slot.job.reset();
  slot.pending = -1;
  // Whatever the decoder or stop filter held back is part of the answer (not after a stop).
  if (slot.step && reason != "error" && reason != "cancelled") job->push_text(slot.step->flush());
  job->completion_tokens_ = slot.generated;
  job->timing_.finished = Clock::now();
  if (slot.generated == 0 && job->timing_.first_token == Clock::time_point{})
    job->timing_.first_token = job->timing_.finished;
  finish_job(*job, reason, error);
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
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancelled()) {
      (*it)->finish("cancelled");
      totals_.requests_cancelled++;
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

// Samples the next token of a slot from its logits row and hands its text to the job.
void Scheduler::sample_and_emit(Slot& slot, const float* logits) {
  const Tokenizer& tok = engine_->tokenizer();
  Job& job = *slot.job;
  const int32_t n_vocab = int32_t(engine_->model().hparams().n_vocab);
  // The step biases and masks a copy: logprobs stay the model's own.
  const int64_t ctx_left = options_.ctx_size - int64_t(slot.history.size());
  const int32_t id = slot.step->pick(logits, n_vocab, slot.history, ctx_left);
  if (slot.generated == 0) job.timing_.first_token = Clock::now();
  std::string text;
  const bool more = slot.step->take(id, &text);
  if (slot.step->emitted()) {
    slot.generated++;
    job.output_tokens_.push_back(id);
    if (job.logprobs_top >= 0)
      job.push_logprob(token_logprob(logits, n_vocab, id, job.logprobs_top, tok));
    job.push_text(text);
  }
  if (!more) {
    const std::string& reason = slot.step->finish_reason();
    return finish_slot(slot, reason, reason == "error" ? slot.step->error().message() : "");
  }
  if (int64_t(slot.history.size()) >= options_.ctx_size) return finish_slot(slot, "length");
  slot.pending = id;
}

void Scheduler::step() {
  const Model& model = engine_->model();
  std::vector<int32_t> tokens;
  std::vector<BatchSegment> segs;
  std::vector<Slot*> seg_slot;
  std::vector<bool> seg_samples;  // does this segment's logits row pick a token?
  int64_t budget = options_.batch_tokens;
  // Decode tokens first: they keep running answers flowing while long prompts are chunked.
  for (auto& s : slots_) {
    if (!s->job || s->pending < 0 || budget == 0) continue;
    tokens.push_back(s->pending);
    segs.push_back({&s->kv, int64_t(s->history.size()), 1, false});
    seg_slot.push_back(s.get());
    seg_samples.push_back(true);
    --budget;
  }
  int64_t prompt_evaluated = 0;
  for (auto& s : slots_) {
    if (!s->job || s->pending >= 0 || budget == 0) continue;
    const auto& prompt = s->job->prompt;
    const int64_t n = std::min<int64_t>(budget, int64_t(prompt.size() - s->prompt_done));
    if (n <= 0) continue;
    tokens.insert(tokens.end(), prompt.begin() + long(s->prompt_done),
                  prompt.begin() + long(s->prompt_done) + n);
    segs.push_back({&s->kv, int64_t(s->history.size()), n, false});
    seg_slot.push_back(s.get());
    seg_samples.push_back(s->prompt_done + size_t(n) == prompt.size());
    budget -= n;
    prompt_evaluated += n;
  }
  if (segs.empty()) return;

  std::vector<float> logits;
  Timer timer;
  const Status st = model.forward(tokens, segs, scratch_, &logits);
  const double seconds = timer.elapsed_ms() / 1000.0;
  if (!st.is_ok()) {
    // The caches of this batch are in an unknown state: forget them and fail their jobs.
    for (Slot* s : seg_slot) {
      s->history.clear();
      s->kv.set_used(0);
      if (s->job) finish_slot(*s, "error", st.message());
    }
    return;
  }
  const int64_t n_vocab = model.hparams().n_vocab;
  size_t t = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    Slot& s = *seg_slot[i];
    s.history.insert(s.history.end(), tokens.begin() + long(t),
                     tokens.begin() + long(t + size_t(segs[i].n_tokens)));
    t += size_t(segs[i].n_tokens);
    if (s.pending >= 0) {
      s.pending = -1;
    } else {
      s.prompt_done += size_t(segs[i].n_tokens);
    }
    if (seg_samples[i]) sample_and_emit(s, logits.data() + i * size_t(n_vocab));
  }
  std::lock_guard<std::mutex> lock(mu_);
  totals_.steps++;
  totals_.forward_seconds += seconds;
  totals_.prompt_evaluated += prompt_evaluated;
  // Every sampled token counts as generated once (the first comes from the prompt's logits).
  int64_t sampled = 0;
  for (size_t i = 0; i < segs.size(); ++i) sampled += seg_samples[i] ? 1 : 0;
  totals_.generated_tokens += sampled;
  const auto now = Clock::now();
  recent_.emplace_back(now, sampled);
  while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10))
    recent_.pop_front();
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
    finish_job(*job, reason, error);
  };
  if (job->cancelled()) return done_job("cancelled", "");
  const auto& input = job->inputs[e.input];
  if (e.offset == 0) {
    e.kv.set_used(0);
    e.sum.assign(size_t(E), 0.0);
  }
  const size_t n = std::min(input.size() - e.offset, size_t(options_.batch_tokens));
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
    {
      std::unique_lock<std::mutex> lock(mu_);
      admit_locked();
      const bool busy = running_ > 0;
      if (stopping_) break;
      if (!busy && worked_since_trim) {
        // Going idle after a burst: what the burst freed goes back to the kernel, so RSS
        // between bursts is what the server holds, not what it once needed.
        lock.unlock();
        release_free_heap_memory();
        worked_since_trim = false;
        continue;
      }
      if (!busy) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        continue;
      }
    }
    worked_since_trim = true;
    drop_cancelled();
    step();
    embed_step();
    int busy = 0;
    int64_t used = 0;
    for (auto& s : slots_) {
      busy += s->job ? 1 : 0;
      used += int64_t(s->history.size());  // idle slots keep their cache for prefix reuse
    }
    std::lock_guard<std::mutex> lock(mu_);
    totals_.slots_busy = busy;
    totals_.kv_used = used;
  }
  for (auto& s : slots_)
    if (s->job) finish_slot(*s, "cancelled", "the server is shutting down");
  while (!embed_->jobs.empty()) {
    embed_->jobs.front()->finish("cancelled", "the server is shutting down");
    embed_->jobs.pop_front();
  }
}

}  // namespace hearth
