// Greedy generation (Model::decode_greedy): the plain loop of decode + host argmax, and the
// chained form (Model::decode_chained, greedy or sampled) where the backend picks each token on
// the device and steps queue ahead of the host (its loop: backend/decode-loop.cpp). A new stop
// condition goes in both loops (and must leave kv.used() as the plain loop does).

#include "model/model.h"

namespace hearth {

Result<GreedyRun> Model::decode_greedy(KvCache& kv, int32_t token, int64_t max_steps,
                                       ForwardScratch& scratch,
                                       const std::function<bool(int32_t)>& on_token) const {
  if (token < 0 || token >= hp_.n_vocab)
    return Status::error("token id " + std::to_string(token) + " is out of range (vocabulary has " +
                         std::to_string(hp_.n_vocab) + " tokens)");
  if (!on_token) return Status::error("decode_greedy: no token callback");
  if (can_chain(Backend::PickRule{}, 0))
    return decode_chained(kv, token, max_steps, scratch, Backend::PickRule{}, {}, on_token);

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

bool Model::can_chain(const Backend::PickRule& rule, int64_t history_len) const {
  // Chaining needs the whole step on one backend (no host hand-over between groups) and no
  // debug taps (they read activations back mid-step).
  return groups_.size() == 1 && !debug_tap && groups_[0].decode_loop->chain_depth() > 0 &&
         groups_[0].backend->can_pick(rule, history_len);
}

Result<GreedyRun> Model::decode_chained(KvCache& kv, int32_t token, int64_t max_steps,
                                        ForwardScratch& scratch, const Backend::PickRule& rule,
                                        std::span<const int32_t> history,
                                        const std::function<bool(int32_t)>& on_token) const {
  if (token < 0 || token >= hp_.n_vocab)
    return Status::error("token id " + std::to_string(token) + " is out of range (vocabulary has " +
                         std::to_string(hp_.n_vocab) + " tokens)");
  if (!on_token) return Status::error("decode_chained: no token callback");
  if (!can_chain(rule, int64_t(history.size())))
    return Status::error("decode_chained: this model's backend cannot pick by the rule");
  HEARTH_TRY(prepare_scratch(scratch, 1));
  std::vector<int32_t> tokens(1);
  std::vector<BatchSegment> segs{BatchSegment{&kv, 0, 1, false}};
  Pass pass{tokens, segs, {0}, 1, 1, false};
  const auto ops = [&](int32_t t, int64_t pos) {
    tokens[0] = t;
    segs[0].pos0 = pos;
    pass.pos[0] = int32_t(pos);
    run_group(0, pass, scratch);
  };
  // The step at `pos` wrote its cache row: the cache holds pos + 1 positions once its token
  // reaches the host, as after the plain loop's decode().
  const auto taken = [&](int32_t t, int64_t pos) {
    kv.set_used(pos + 1);
    return on_token(t);
  };
  // A pooled cache commits each step's block before the step is queued (outside any capture).
  const auto make_room = [&](int64_t positions) { return kv.ensure(positions); };
  return groups_[0].decode_loop->chain(step_key(0, scratch, kv), rule, history, token, kv.used(),
                                       kv.capacity(), max_steps, scratch.per_backend[0].logits,
                                       hp_.n_vocab, ops, taken, make_room);
}

}  // namespace hearth
