// The scheduler's per-sequence state (internal to runtime/scheduler*.cpp): a slot and what a
// preempted job carries back to the queue.
#pragma once

#include <memory>
#include <vector>

#include "runtime/generation-step.h"
#include "runtime/scheduler.h"

namespace hearth {

// A sequence slot: its cache, the tokens whose entries the cache holds, and the job it runs.
struct Scheduler::Slot {
  KvCache kv;
  std::vector<int32_t> history;  // tokens at positions [0, history.size()) of kv
  std::shared_ptr<Job> job;
  // The tokens to prefill before the next pick: the job's prompt, or after a preemption the
  // prompt, the tokens generated so far and the pending one (whose logits pick the next).
  std::vector<int32_t> feed;
  size_t prompt_done = 0;  // feed tokens in the cache (reused prefix included)
  int32_t pending = -1;    // sampled token not yet run through the model
  int32_t generated = 0;
  uint64_t last_used = 0;  // admission order (a resumed job keeps its first admission's)
  std::unique_ptr<GenerationStep> step;  // sampling, stops, streaming: the job's own
  // A later choice of a request waiting for the slot that prefills the shared prompt; its
  // cache receives that prompt by copy when the prefill completes (then null again).
  Slot* leader = nullptr;
};

// A finished request's cache kept beyond the slots (a prefix cache entry), with the tokens
// whose rows it holds; last_used orders eviction with the idle slots'.
struct Scheduler::CachedPrefix {
  KvCache kv;
  std::vector<int32_t> tokens;
  uint64_t last_used = 0;
};

// One forward pass's rows, as Scheduler::plan_pass chose them: each segment's slot and
// whether its last row picks a token, the tokens in segment order.
struct Scheduler::PassPlan {
  std::vector<int32_t> tokens;
  std::vector<BatchSegment> segs;
  std::vector<Slot*> seg_slot;
  std::vector<bool> seg_samples;  // does this segment's logits row pick a token?
  int64_t prompt_tokens = 0;      // of tokens, those of prompt chunks
};

// What a preempted job's next slot recomputes and continues with (Job::resume_).
struct Job::Resume {
  std::vector<int32_t> feed;
  std::unique_ptr<GenerationStep> step;
  int32_t generated = 0;
  uint64_t admitted = 0;  // its Slot::last_used when first admitted
};

}  // namespace hearth
