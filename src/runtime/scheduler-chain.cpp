// The scheduler's chained steps. While one sequence is all there is to run (one slot decoding,
// nothing queued, no prompt to compute) and its rule picks on the device, its tokens come from
// Model::decode_chained, as `hearth run`'s do: the pick stays on the device and a few steps are
// queued ahead of the host, so the GPU does not idle while the host streams each token (H200,
// 7B Q4_0: a served stream's step took 1.96 ms against 1.82 for the chained decode). The chain
// stops at the token after a request arrives (the next step batches it in), when the job is
// cancelled, or when the sequence ends; steps queued past the stop only wrote cache rows at or
// beyond the sequence's end.
#include <algorithm>

#include "base/timer.h"
#include "runtime/scheduler-slot.h"
#include "runtime/scheduler.h"

namespace hearth {

namespace {

// Tokens one chained call may produce: the blocks for them are taken before it starts, and an
// arrival waits at most for the steps already queued.
constexpr int64_t kChainSteps = 64;

}  // namespace

bool Scheduler::step_single_stream(StepRecord* record) {
  Slot* only = nullptr;
  for (auto& s : slots_) {
    if (!s->job) continue;
    if (only || s->leader || s->pending < 0) return false;
    only = s.get();
  }
  if (!only) return false;
  // Other work: a queued request, or embeddings (running_ counts them with the slots' jobs).
  const auto arrivals = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return !queue_.empty() || running_ > 1;
  };
  if (arrivals()) return false;
  Slot& s = *only;
  if (device_pick(s) == DevicePick::kNone) return false;
  const Backend::PickRule rule = *s.step->device_rule();
  std::vector<int32_t> history = s.history;  // the tokens so far, the pending one last
  history.push_back(s.pending);
  const Model& model = engine_->model();
  if (!model.can_chain(rule, int64_t(history.size()))) return false;
  // The chain commits its blocks through the cache itself: give the cache its steps' blocks
  // the scheduler's way first (evicting cached prefixes), and run no more steps than it holds.
  const int64_t pos0 = int64_t(s.history.size());
  int64_t steps = std::min<int64_t>(kChainSteps, options_.ctx_size - pos0);
  if (steps >= 2 && make_room(s, pos0 + steps, {&s}) == Room::kWait)
    steps = s.kv.held_blocks() * pool_->block_tokens() - pos0;
  if (steps < 2) return false;

  Job* job = s.job.get();
  Finish finish;
  bool finished = false;
  int64_t emitted = 0;
  Timer timer;
  const auto run =
      model.decode_chained(s.kv, s.pending, steps, scratch_, rule, history, [&](int32_t t) {
        s.history.push_back(s.pending);
        s.pending = -1;
        ++emitted;
        {
          std::lock_guard<std::mutex> lock(mu_);
          totals_.generated_tokens++;  // before the text: a client that reads the counters
        }                              // after its answer finds its tokens there
        if (!emit_token(s, nullptr, t, &finish)) {
          finished = true;
          return false;
        }
        notifier_.flush();  // each token's text now: a chain is many steps long
        return !job->cancelled() && !arrivals();
      });
  const double seconds = timer.elapsed_ms() / 1000.0;
  if (run.is_ok() && emitted == 0) return false;  // nothing ran: a plain step instead
  record->segments = 1;
  record->tokens = record->sampled = record->device_picks = record->passes = emitted;
  record->forward_ms = seconds * 1000.0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    totals_.steps += emitted;
    totals_.forward_seconds += seconds;
    add_recent_locked(emitted);
  }
  if (!run.is_ok()) {  // the cache is in an unknown state: forget it and fail the job
    forget_cache(s);
    if (s.job) finish_slot(s, "error", run.message());
  } else if (finished) {
    finish_slot(s, finish.reason, finish.error);
  }
  return true;
}

}  // namespace hearth
