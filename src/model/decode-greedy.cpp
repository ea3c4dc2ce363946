// Greedy generation (Model::decode_greedy): the plain loop of decode + host argmax, and the
// chained form where the backend picks each token on the device and steps queue ahead of the host.
// A new stop condition goes in both loops (and must leave kv.used() as the plain loop does).

#include "model/model.h"

namespace hearth {

Result<GreedyRun> Model::decode_greedy(KvCache& kv, int32_t token, int64_t max_steps,
                                       ForwardScratch& scratch,
                                       const std::function<bool(int32_t)>& on_token) const {
  if (token < 0 || token >= hp_.n_vocab)
    return Status::error("token id " + std::to_string(token) + " is out of range (vocabulary has " +
                         std::to_string(hp_.n_vocab) + " tokens)");
  if (!on_token) return Status::error("decode_greedy: no token callback");
  // Chaining needs the whole step on one backend (no host hand-over between groups) and no
  // debug taps (they read activations back mid-step).
  const int depth =
      groups_.size() == 1 && !debug_tap ? groups_[0].backend->greedy_chain_depth() : 0;
  if (depth > 0) return decode_greedy_chained(kv, token, max_steps, scratch, on_token, depth);

  GreedyRun run;
  std::vector<float> logits;
  while (run.steps < max_steps) {
    if (kv.used() >= kv.capacity()) {
      run.context_full = true;
      break;
    }
    HEARTH_TRY(decode(kv, token, scratch, &logits));
    token = greedy_argmax(logits.data(), hp_.n_vocab);
    ++run.steps;
    if (!on_token(token)) break;
  }
  return run;
}

// Steps [0, queued) are on the device, [0, done) have handed their token to the host. Step i
// runs at position pos0 + i; its input token is the output of step i - 1, which the host only
// knows once i == done: until then step i must be a chained replay (the device's token). A step
// that cannot replay (the backend's first steps at a capacity warm up and record) waits for the
// queue to drain and runs with the host's token.
Result<GreedyRun> Model::decode_greedy_chained(KvCache& kv, int32_t token, int64_t max_steps,
                                               ForwardScratch& scratch,
                                               const std::function<bool(int32_t)>& on_token,
                                               int depth) const {
  HEARTH_TRY(prepare_scratch(scratch, 1));
  Backend* be = groups_[0].backend;
  const int64_t pos0 = kv.used(), cap = kv.capacity();
  // The chain owns the backend's recorded step and its device token until it returns.
  std::lock_guard<std::mutex> lock(step_mutex_);
  chain_thread_.store(std::this_thread::get_id());
  struct ChainOwner {  // cleared however this returns
    std::atomic<std::thread::id>& owner;
    ~ChainOwner() { owner.store(std::thread::id()); }
  } owner{chain_thread_};
  match_step_key(0, scratch, kv);

  std::vector<int32_t> tokens(1);
  std::vector<BatchSegment> segs{BatchSegment{&kv, 0, 1, false}};
  Pass pass{tokens, segs, {0}, 1, 1, false};
  const float* logits = scratch.per_backend[0].logits;

  GreedyRun run;
  int64_t queued = 0, done = 0;
  bool stop = false;
  Status failed;
  while (true) {
    while (!stop && failed.is_ok() && queued < max_steps && pos0 + queued < cap &&
           queued - done < depth) {
      const int64_t pos = pos0 + queued;
      if (queued > done) {
        if (!be->begin_chained_step(pos, cap)) break;  // needs the host token: drain first
      } else {
        tokens[0] = token;
        segs[0].pos0 = pos;
        pass.pos[0] = int32_t(pos);
        if (!be->begin_decode_step(token, pos, cap)) run_group(0, pass, scratch);
      }
      be->end_decode_step();
      be->pick_greedy(logits, hp_.n_vocab, pos);
      if (Status s = be->status(); !s.is_ok()) failed = s;
      ++queued;
    }
    if (queued == done) break;
    // Oldest step first. After a stop or an error the rest only drain (their tokens unused).
    Result<int32_t> picked = be->picked_token(pos0 + done);
    ++done;
    if (stop || !failed.is_ok()) continue;
    if (!picked.is_ok()) {
      failed = picked.status();
      continue;
    }
    token = picked.value();
    kv.set_used(pos0 + done);
    ++run.steps;
    if (!on_token(token)) stop = true;
  }
  if (!failed.is_ok()) return failed;
  run.context_full = !stop && run.steps < max_steps && pos0 + run.steps >= cap;
  return run;
}

}  // namespace hearth
