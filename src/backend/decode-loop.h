// The decode loop of one backend: replaying its recorded single-token step (CUDA graphs) and
// chaining steps whose tokens the device picks itself (argmax or a seeded draw). The model's
// forward pass is handed in as `ops` (the step's backend calls); this object owns everything about
// capture: which buffers the recorded step belongs to, the lock that keeps one step or chain at a
// time, and the chained loop's bookkeeping. A backend that records nothing and cannot chain (the
// CPU) runs `ops` every step through the same calls. The loader makes one beside each backend.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <thread>

#include "backend/backend.h"
#include "base/status.h"

namespace hearth {

// What a recorded step was recorded with (the activations, their capacity, the sequence's
// cache): it replays only for the same ones; a new key drops the recording.
struct DecodeStepKey {
  const void* activations = nullptr;
  int64_t capacity_tokens = 0;
  const void* kv = nullptr;
  bool operator==(const DecodeStepKey&) const = default;
};

// How a chained (or greedy) run ended.
struct GreedyRun {
  int64_t steps = 0;          // decode steps run = tokens handed to on_token
  bool context_full = false;  // stopped because the cache had no room for the next step
};

class DecodeLoop {
 public:
  explicit DecodeLoop(Backend& backend) : be_(backend) {}
  DecodeLoop(const DecodeLoop&) = delete;

  // Runs the step for `token` at `pos` of a cache of `capacity` rows: the recorded step replayed
  // when it was recorded for `key`, else `ops()` (which the backend may record). An error when
  // called from a chained run's token callback on the same thread (the chain holds the step).
  Status step(const DecodeStepKey& key, int32_t token, int64_t pos, int64_t capacity,
              const std::function<void()>& ops);

  // Steps the backend lets chained decoding queue ahead of the host (0: it cannot chain).
  int chain_depth() const { return be_.greedy_chain_depth(); }

  // Decoding with the device picking tokens by `rule` (chain_depth() > 0 and the backend's
  // can_pick(rule)): feeds `token` at pos0, then each picked token in turn, at most max_steps
  // steps and never past `capacity`, with up to chain_depth() steps queued ahead of the host.
  // history: the tokens so far, `token` last (the penalties' window). ops(token, pos) runs one
  // step's backend calls whose logits row is `logits` [n_vocab] (replays need not call it).
  // on_token(token, pos) gets each picked token with the position whose step produced it,
  // oldest first; returning false stops (steps already queued finish, their tokens unused).
  // make_room(n), when given, runs before the step at position n - 1 is queued (a pooled KV
  // cache commits its memory there); its error ends the chain with that error.
  Result<GreedyRun> chain(const DecodeStepKey& key, const Backend::PickRule& rule,
                          std::span<const int32_t> history, int32_t token, int64_t pos0,
                          int64_t capacity, int64_t max_steps, const float* logits, int64_t n_vocab,
                          const std::function<void(int32_t token, int64_t pos)>& ops,
                          const std::function<bool(int32_t token, int64_t pos)>& on_token,
                          const std::function<Status(int64_t positions)>& make_room = nullptr);

 private:
  void match_key(const DecodeStepKey& key);  // caller holds mu_

  Backend& be_;
  std::mutex mu_;
  DecodeStepKey key_;
  // The thread running a chain (which holds mu_ throughout): a step from its own callback is an
  // error, not a self-deadlock.
  std::atomic<std::thread::id> chain_thread_{};
};

}  // namespace hearth
