// DecodeLoop: the recorded step's key and lock, and the chained loop. Steps [0, queued)
// of a chain are on the device, [0, done) have handed their token to the host. Step i runs at
// position pos0 + i; its input token is the output of step i - 1, which the host only knows once
// i == done: until then step i must be a chained replay (the device's token). A step that cannot
// replay (the backend's first steps at a capacity warm up and record) waits for the queue to
// drain and runs with the host's token.
#include "backend/decode-loop.h"

namespace hearth {

void DecodeLoop::match_key(const DecodeStepKey& key) {
  if (key_ == key) return;
  // A step for another cache with the same activations (a server slot's new request) re-records
  // without a sizing step first.
  be_.reset_decode_steps(key_.activations && key.activations == key_.activations &&
                         key.capacity_tokens == key_.capacity_tokens);
  key_ = key;
}

Status DecodeLoop::step(const DecodeStepKey& key, int32_t token, int64_t pos, int64_t capacity,
                        const std::function<void()>& ops) {
  if (chain_thread_.load() == std::this_thread::get_id())
    return Status::error("decode called from inside a chained generation's token callback");
  std::lock_guard<std::mutex> lock(mu_);
  match_key(key);
  if (!be_.begin_decode_step(token, pos, capacity)) ops();
  be_.end_decode_step();
  return be_.status();
}

Result<GreedyRun> DecodeLoop::chain(const DecodeStepKey& key, const Backend::PickRule& rule,
                                    std::span<const int32_t> history, int32_t token, int64_t pos0,
                                    int64_t capacity, int64_t max_steps, const float* logits,
                                    int64_t n_vocab,
                                    const std::function<void(int32_t, int64_t)>& ops,
                                    const std::function<bool(int32_t, int64_t)>& on_token,
                                    const std::function<Status(int64_t)>& make_room) {
  const int depth = chain_depth();
  if (depth <= 0) return Status::error(be_.name() + ": chained decoding is not supported");
  if (!be_.can_pick(rule, int64_t(history.size())))
    return Status::error(be_.name() + ": cannot pick by this sampling rule on the device");
  // The chain owns the backend's recorded step and its device token until it returns.
  std::lock_guard<std::mutex> lock(mu_);
  chain_thread_.store(std::this_thread::get_id());
  struct ChainOwner {  // cleared however this returns
    std::atomic<std::thread::id>& owner;
    ~ChainOwner() { owner.store(std::thread::id()); }
  } owner{chain_thread_};
  match_key(key);
  HEARTH_TRY(be_.begin_picks(rule, history));

  GreedyRun run;
  int64_t queued = 0, done = 0;
  bool stop = false;
  Status failed;
  while (true) {
    while (!stop && failed.is_ok() && queued < max_steps && pos0 + queued < capacity &&
           queued - done < depth) {
      const int64_t pos = pos0 + queued;
      if (make_room) {
        if (Status s = make_room(pos + 1); !s.is_ok()) {
          failed = s;
          break;
        }
      }
      if (queued > done) {
        if (!be_.begin_chained_step(pos, capacity)) break;  // needs the host token: drain first
      } else if (!be_.begin_decode_step(token, pos, capacity)) {
        ops(token, pos);
      }
      be_.end_decode_step();
      be_.pick(logits, n_vocab, pos);
      if (Status s = be_.status(); !s.is_ok()) failed = s;
      ++queued;
    }
    if (queued == done) break;
    // Oldest step first. After a stop or an error the rest only drain (their tokens unused).
    Result<int32_t> picked = be_.picked_token(pos0 + done);
    ++done;
    if (stop || !failed.is_ok()) continue;
    if (!picked.is_ok()) {
      failed = picked.status();
      continue;
    }
    token = picked.value();
    ++run.steps;
    if (!on_token(token, pos0 + done - 1)) stop = true;
  }
  if (!failed.is_ok()) return failed;
  run.context_full = !stop && run.steps < max_steps && pos0 + run.steps >= capacity;
  return run;
}

}  // namespace hearth
