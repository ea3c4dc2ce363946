// Session: prefix reuse, the generate loop (sampling, EOS, stop strings, UTF-8 streaming, timing).
#include "runtime/session.h"

#include <algorithm>

#include "base/timer.h"
#include "runtime/generation-step.h"
#include "runtime/stop-strings.h"

namespace hearth {

Session::Session(std::shared_ptr<const Engine> engine, int64_t n_ctx, const KvCacheTypes& kv_types)
    : engine_(std::move(engine)), n_ctx_(n_ctx), kv_types_(kv_types) {}

Status Session::init() {
  if (n_ctx_ <= 0) n_ctx_ = engine_->model().hparams().n_ctx_train;
  HEARTH_ASSIGN_OR_RETURN(kv_,
                          engine_->model().new_kv_cache(n_ctx_, kv_types_, engine_->kv_pool()));
  return Status::ok();
}

void Session::reset() {
  history_.clear();
  kv_.set_used(0);
  kv_.release_unused();  // the memory goes back now, not when the session ends
}

Status Session::evaluate(const std::vector<int32_t>& prompt, std::vector<float>* logits,
                         int64_t* evaluated) {
  if (prompt.empty()) return Status::error("empty prompt");
  if (int64_t(prompt.size()) > n_ctx_)
    return Status::error("prompt has " + std::to_string(prompt.size()) +
                         " tokens but the context holds " + std::to_string(n_ctx_));
  // Reuse the longest common prefix, but always recompute at least the last token for logits.
  size_t keep = 0;
  while (keep < history_.size() && keep < prompt.size() && history_[keep] == prompt[keep]) ++keep;
  if (keep == prompt.size()) --keep;
  keep = size_t(kv_.reusable_prefix(int64_t(keep)));  // a sliding layer's ring may not reach back
  kv_.set_used(int64_t(keep));
  history_.resize(keep);
  std::vector<int32_t> rest(prompt.begin() + long(keep), prompt.end());
  HEARTH_TRY(engine_->model().prefill(kv_, rest, scratch_, logits));
  history_.insert(history_.end(), rest.begin(), rest.end());
  if (evaluated) *evaluated = int64_t(rest.size());
  return Status::ok();
}

Status Session::decode_one(int32_t token, std::vector<float>* logits) {
  if (kv_.used() >= n_ctx_) return Status::error("context is full");
  HEARTH_TRY(engine_->model().decode(kv_, token, scratch_, logits));
  history_.push_back(token);
  return Status::ok();
}

Result<std::vector<float>> Session::all_logits(const std::vector<int32_t>& tokens) {
  reset();
  if (int64_t(tokens.size()) > n_ctx_)
    return Status::error("sequence of " + std::to_string(tokens.size()) +
                         " tokens exceeds the context of " + std::to_string(n_ctx_));
  std::vector<float> logits;
  HEARTH_TRY(engine_->model().prefill(kv_, tokens, scratch_, &logits, true));
  history_ = tokens;
  return logits;
}

Result<GenerateResult> Session::generate(const std::vector<int32_t>& prompt,
                                         const GenerateOptions& opt,
                                         const TokenCallback& on_token) {
  const int32_t n_vocab = int32_t(engine_->model().hparams().n_vocab);
  GenerateResult result;
  GenerateStats& st = result.stats;
  st.prompt_tokens = int64_t(prompt.size());

  Timer timer;
  std::vector<float> logits;
  HEARTH_TRY(evaluate(prompt, &logits, &st.prompt_evaluated));
  st.prompt_ms = timer.elapsed_ms();

  GenerationStep step(engine_->tokenizer(), opt);
  Timer gen_timer;
  st.finish_reason = "length";
  // One generated token through the shared step, then this loop's own callback. False: stop.
  auto take = [&](int32_t id) {
    std::string piece;
    const bool more = step.take(id, &piece);
    if (step.emitted()) {
      result.tokens.push_back(id);
      st.generated_tokens = step.generated();
      result.text += piece;
      const bool keep_going = on_token ? on_token(id, piece) : true;
      if (!keep_going && !step.stop_string_matched()) {  // a stop string outranks the caller
        st.finish_reason = "cancelled";
        return false;
      }
    }
    if (!more) st.finish_reason = step.finish_reason();
    return more;
  };
  if (opt.max_tokens != 0) {
    // The first token comes from the prompt's logits.
    int32_t id = step.pick(logits.data(), n_vocab, history_, n_ctx_ - kv_.used());
    st.ttft_ms = timer.elapsed_ms();
    gen_timer.reset();
    if (take(id)) {
      const std::optional<Backend::PickRule> rule = step.device_rule();
      const Model& model = engine_->model();
      if (rule && rule->greedy()) {
        // Greedy without penalties needs only the argmax: the model may keep it on the device
        // and run steps ahead (Model::decode_greedy); same tokens as the loop below.
        int32_t fed = id;  // the token whose step produced the next callback's token
        HEARTH_ASSIGN_OR_RETURN(GreedyRun run,
                                model.decode_greedy(kv_, id, n_ctx_, scratch_, [&](int32_t next) {
                                  history_.push_back(fed);
                                  fed = next;
                                  return take(next);
                                }));
        if (run.context_full) st.finish_reason = "context";
      } else if (rule && model.can_chain(*rule, int64_t(history_.size()) + 1)) {
        // Sampling on the device inside the chain (same chain and seed; its draws come from the
        // device's generator, so the tokens differ from the host loop's but follow the same
        // distribution and repeat for the same seed).
        std::vector<int32_t> window = history_;
        window.push_back(id);
        int32_t fed = id;
        HEARTH_ASSIGN_OR_RETURN(
            GreedyRun run,
            model.decode_chained(kv_, id, n_ctx_, scratch_, *rule, window, [&](int32_t next) {
              history_.push_back(fed);
              fed = next;
              return take(next);
            }));
        if (run.context_full) st.finish_reason = "context";
      } else {
        while (true) {
          if (kv_.used() >= n_ctx_) {
            st.finish_reason = "context";
            break;
          }
          HEARTH_TRY(decode_one(id, &logits));
          id = step.pick(logits.data(), n_vocab, history_, n_ctx_ - kv_.used());
          if (!take(id)) break;
        }
      }
    }
  }
  if (step.finish_reason() == "error") return step.error();
  st.gen_ms = st.generated_tokens > 1 ? gen_timer.elapsed_ms() : 0;
  if (const std::string tail = step.flush(); !tail.empty()) {
    result.text += tail;
    if (on_token) on_token(-1, tail);
  }
  return result;
}

Status Session::save_state(std::vector<int32_t>* tokens, std::vector<uint8_t>* kv) {
  *tokens = history_;
  return kv_.save(int64_t(history_.size()), kv);
}

Status Session::restore_state(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& kv,
                              const KvCacheTypes& saved_types) {
  if (int64_t(tokens.size()) > n_ctx_) return Status::error("saved state exceeds the context");
  if (saved_types != kv_types_)
    return Status::error(std::string("saved state holds ") + kv_type_name(saved_types.k) + " K / " +
                         kv_type_name(saved_types.v) + " V cache rows; this session's cache is " +
                         kv_type_name(kv_types_.k) + " / " + kv_type_name(kv_types_.v));
  HEARTH_TRY(kv_.restore(kv, int64_t(tokens.size())));
  history_ = tokens;
  return Status::ok();
}

}  // namespace hearth
