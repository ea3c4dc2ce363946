// The scheduler's batched step: which slots take part and with how many tokens (decode tokens
// first in the budget, prompt chunks bounded while anyone decodes), one forward over all of
// them, then each slot's next token: picked where the logits are for plain greedy slots (and, on
// a GPU, sampled ones without penalties: only ids cross the bus), by the host sampler from the
// logits row for the rest.
#include <algorithm>

#include "base/timer.h"
#include "runtime/generation-step.h"
#include "runtime/scheduler-slot.h"
#include "runtime/scheduler.h"
#include "runtime/token-logprobs.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

using Clock = std::chrono::steady_clock;

// The first choice's prompt is complete in `leader`'s cache: every choice waiting on it gets a
// copy of those rows and samples its first token from the same logits (with its own sampler).
void Scheduler::start_followers(Slot& leader, const float* logits) {
  for (auto& f : slots_) {
    if (f->leader != &leader) continue;
    f->leader = nullptr;
    if (!f->job) continue;
    // A pool too full for the copy: the choice recomputes its prompt later instead.
    if (make_room(*f, int64_t(leader.history.size()), {&leader}) != Room::kOk) {
      if (f->job) preempt(*f);
      continue;
    }
    const Status st = f->kv.copy_prefix_from(leader.kv, int64_t(leader.history.size()));
    if (!st.is_ok()) {
      finish_slot(*f, "error", st.message());
      continue;
    }
    f->history = leader.history;
    f->prompt_done = f->history.size();
    f->job->cached_tokens_ = leader.job->cached_tokens_;
    sample_and_emit(*f, logits);
  }
}

// Where a slot's next token is picked: on the backend that holds the logits (the argmax, or a
// draw by the slot's rule where that backend draws: a GPU, for rules without penalties), or by
// the host's GenerationStep::pick from the row (logprobs, a bias or a constraint, penalties, or
// choices waiting to sample their first token from the same row).
Scheduler::DevicePick Scheduler::device_pick(const Slot& slot) const {
  if (!slot.job || !slot.step || slot.job->logprobs_top >= 0) return DevicePick::kNone;
  const std::optional<Backend::PickRule> rule = slot.step->device_rule();
  if (!rule) return DevicePick::kNone;
  if (std::any_of(slots_.begin(), slots_.end(), [&](const auto& f) { return f->leader == &slot; }))
    return DevicePick::kNone;
  if (rule->greedy()) return DevicePick::kArgmax;
  return engine_->model().head_backend()->can_draw_rows(*rule) ? DevicePick::kDraw
                                                               : DevicePick::kNone;
}

void Scheduler::add_recent_locked(int64_t tokens) {
  const auto now = Clock::now();
  recent_.emplace_back(now, tokens);
  while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10))
    recent_.pop_front();
}

// Samples the next token of a slot from its logits row and hands its text to the job.
// Without a row (device_pick slots), `picked` is the token the backend picked.
void Scheduler::sample_and_emit(Slot& slot, const float* logits, int32_t picked) {
  Finish finish;
  if (!emit_token(slot, logits, picked, &finish)) finish_slot(slot, finish.reason, finish.error);
}

bool Scheduler::emit_token(Slot& slot, const float* logits, int32_t picked, Finish* finish) {
  const Tokenizer& tok = engine_->tokenizer();
  Job& job = *slot.job;
  const int32_t n_vocab = int32_t(engine_->model().hparams().n_vocab);
  // The step biases and masks a copy: logprobs stay the model's own.
  const int64_t ctx_left = options_.ctx_size - int64_t(slot.history.size());
  const int32_t id = logits ? slot.step->pick(logits, n_vocab, slot.history, ctx_left) : picked;
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
    finish->reason = slot.step->finish_reason();
    if (finish->reason == "error") finish->error = slot.step->error().message();
    return false;
  }
  if (int64_t(slot.history.size()) >= options_.ctx_size) {
    finish->reason = "length";
    return false;
  }
  slot.pending = id;
  return true;
}

void Scheduler::plan_pass(const std::vector<Slot*>& order, int64_t decoding, int64_t prompt_budget,
                          bool only_prompts, PassPlan* plan) {
  int64_t budget = options_.batch_tokens, decoders = only_prompts ? 0 : decoding;
  for (Slot* s : order) {
    if (!s->job || s->leader || budget == 0) continue;
    const bool decode = s->pending >= 0;
    if (decode && only_prompts) continue;
    if (decode) --decoders;
    const int64_t pos0 = int64_t(s->history.size());
    int64_t n = decode ? 1
                       : std::min({budget - decoders, prompt_budget,
                                   int64_t(s->feed.size() - s->prompt_done)});
    if (n <= 0) continue;
    const Room room = make_room(*s, pos0 + n, plan->seg_slot);
    if (room == Room::kWait && !decode) {  // prefill what its blocks hold; the rest waits
      n = std::min(n, s->kv.held_blocks() * pool_->block_tokens() - pos0);
      if (n <= 0) continue;
    } else if (room == Room::kWait) {
      // Nothing newer to take a block from: this sequence steps back, or alone in the pool
      // and still out of room, it has reached what the pool can hold.
      if (running_slots() > 1)
        preempt(*s);
      else
        finish_slot(*s, "length");
      continue;
    }
    if (decode) {
      plan->tokens.push_back(s->pending);
    } else {
      plan->tokens.insert(plan->tokens.end(), s->feed.begin() + long(s->prompt_done),
                          s->feed.begin() + long(s->prompt_done) + n);
      plan->prompt_tokens += n;
      prompt_budget -= n;
    }
    plan->segs.push_back({&s->kv, pos0, n, false});
    plan->seg_slot.push_back(s);
    plan->seg_samples.push_back(decode || s->prompt_done + size_t(n) == s->feed.size());
    budget -= n;
  }
}

void Scheduler::step(StepRecord* record) {
  if (step_single_stream(record)) return;
  Timer prepare_timer;
  const Model& model = engine_->model();
  // Slots in admission order, oldest first, so the oldest sequences take pool blocks first and
  // may preempt newer ones (make_room): the oldest always progress. Decode tokens keep their
  // place in the budget (a prompt chunk leaves one token for each decoding slot still to come),
  // so running answers keep flowing while long prompts are chunked; while any sequence decodes,
  // prompt chunks take at most step_prompt_tokens between two of its tokens, which bounds its
  // inter-token gap.
  std::vector<Slot*> order;
  int64_t decoding = 0, waiting = 0;  // decoding slots; prompt tokens still to compute
  for (auto& s : slots_) {
    order.push_back(s.get());
    decoding += s->job && s->pending >= 0 ? 1 : 0;
    if (s->job && !s->leader && s->pending < 0) waiting += int64_t(s->feed.size() - s->prompt_done);
  }
  std::sort(order.begin(), order.end(),
            [](const Slot* a, const Slot* b) { return a->last_used < b->last_used; });
  const int64_t batch = options_.batch_tokens, spt = options_.step_prompt_tokens;
  if (decoding == 0) paused_prompt_tokens_ = 0;
  // A step_prompt_tokens above one pass: while more prompt tokens wait than the pass shared with
  // the decoding rows can take, and a whole pass is left of the allowance, the pass is prompts
  // only (the decoding slots sit it out).
  const int64_t allowance = spt - paused_prompt_tokens_;
  const int64_t shared = std::clamp<int64_t>(std::min(allowance, batch - decoding), 0, batch);
  const bool prompts_only = decoding > 0 && spt > batch && waiting > shared && allowance >= batch;
  // (shared is the budget whenever the decoding slots share the pass: with step_prompt_tokens
  // at most one pass, nothing is paused and it is step_prompt_tokens within the pass.)
  const int64_t prompt_budget = decoding == 0 || spt <= 0 || prompts_only ? batch : shared;
  PassPlan plan;
  plan_pass(order, decoding, prompt_budget, prompts_only, &plan);
  // No prompt could take a block: the decoding slots go on rather than wait behind it.
  if (prompts_only && plan.segs.empty()) plan_pass(order, decoding, shared, false, &plan);
  if (plan.segs.empty()) return;
  const int64_t prompt_evaluated = plan.prompt_tokens;
  // The running slots took a token (or there were none): their pause starts again.
  const bool decoded = decoding == 0 || prompt_evaluated < int64_t(plan.tokens.size());
  paused_prompt_tokens_ = decoded ? 0 : paused_prompt_tokens_ + prompt_evaluated;
  const std::vector<int32_t>& tokens = plan.tokens;
  const std::vector<BatchSegment>& segs = plan.segs;
  const std::vector<Slot*>& seg_slot = plan.seg_slot;
  const std::vector<bool>& seg_samples = plan.seg_samples;

  // Rows that only pick greedily are picked where the logits are; only the others are read back
  // (with 32 sequences on a GPU that was 4 MB of logits and 32 host picks a step).
  std::vector<uint8_t> want_logits(segs.size());
  std::vector<Backend::RowDraw> draws;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (!seg_samples[i]) continue;
    switch (device_pick(*seg_slot[i])) {
      case DevicePick::kArgmax:
        break;
      case DevicePick::kDraw:
        draws.push_back(
            {int64_t(i), *seg_slot[i]->step->device_rule(), segs[i].pos0 + segs[i].n_tokens - 1});
        break;
      case DevicePick::kNone:
        want_logits[i] = 1;
        break;
    }
  }
  record->prepare_ms = prepare_timer.elapsed_ms();
  record->segments = int(segs.size());
  record->tokens = int64_t(tokens.size());
  record->prompt_tokens = prompt_evaluated;
  for (size_t i = 0; i < segs.size(); ++i) {
    record->sampled += seg_samples[i] ? 1 : 0;
    record->device_picks += seg_samples[i] && !want_logits[i] ? 1 : 0;
  }
  std::vector<float>& logits = logits_;
  std::vector<int32_t>& picked = picked_;
  Timer timer;
  const Status st =
      model.forward_picks(tokens, segs, scratch_, want_logits, draws, &logits, &picked);
  const double seconds = timer.elapsed_ms() / 1000.0;
  record->forward_ms = seconds * 1000.0;
  if (!st.is_ok()) {
    // The caches of this batch are in an unknown state: forget them and fail their jobs.
    for (Slot* s : seg_slot) {
      forget_cache(*s);
      if (s->job) finish_slot(*s, "error", st.message());
    }
    return;
  }
  // Every sampled token counts as generated once (the first comes from the prompt's logits; a
  // request's later choices sample theirs from the first's). Counted before sampling, which may
  // finish a job: a client that reads the counters after its answer finds its tokens there.
  int64_t sampled = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (!seg_samples[i]) continue;
    ++sampled;
    for (auto& f : slots_) sampled += f->leader == seg_slot[i] && f->job ? 1 : 0;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    totals_.steps++;
    totals_.forward_seconds += seconds;
    totals_.prompt_evaluated += prompt_evaluated;
    totals_.generated_tokens += sampled;
    add_recent_locked(sampled);
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
    if (!seg_samples[i]) continue;
    if (!want_logits[i]) {
      sample_and_emit(s, nullptr, picked[i]);
      continue;
    }
    const float* row = logits.data() + i * size_t(n_vocab);
    start_followers(s, row);
    sample_and_emit(s, row);
  }
}

}  // namespace hearth
