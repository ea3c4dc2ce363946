#include "runtime/generation-step.h"

#include <algorithm>
#include <span>

namespace hearth {

GenerationStep::GenerationStep(const Tokenizer& tok, const GenerateOptions& opt)
    : tok_(tok), opt_(opt), sampler_(opt.sampling), decoder_(tok), stops_(opt.stop) {}

Backend::PickRule device_pick_rule(const SamplingParams& p, uint64_t seed) {
  Backend::PickRule r;
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repeat_penalty = p.repeat_penalty;
  r.repeat_last_n = p.repeat_last_n;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.seed = seed;
  return r;
}

std::optional<Backend::PickRule> GenerationStep::device_rule() const {
  if (!opt_.logit_bias.empty() || opt_.constraint) return std::nullopt;
  return device_pick_rule(opt_.sampling, sampler_.seed());
}

int32_t GenerationStep::pick(const float* logits, int32_t n_vocab,
                             const std::vector<int32_t>& history, int64_t ctx_left) {
  TokenConstraint* constraint = opt_.constraint.get();
  if (opt_.logit_bias.empty() && !constraint) return sampler_.sample(logits, n_vocab, history);
  row_.assign(logits, logits + n_vocab);
  for (const auto& [token, bias] : opt_.logit_bias)
    if (token >= 0 && token < n_vocab) row_[size_t(token)] += bias;
  if (constraint) {
    // The budget counts this token: the output must be completable within max_tokens and the
    // context (GrammarConstraint::set_token_budget says how).
    int64_t left = ctx_left;
    if (opt_.max_tokens >= 0) left = std::min<int64_t>(left, opt_.max_tokens - generated_);
    constraint->set_token_budget(left);
    constraint->mask(std::span<float>(row_.data(), row_.size()));
  }
  return sampler_.sample(row_.data(), n_vocab, history);
}

bool GenerationStep::take(int32_t id, std::string* text) {
  text->clear();
  emitted_ = false;
  TokenConstraint* constraint = opt_.constraint.get();
  if (constraint) {
    // The sampler only picks a masked-out token when no allowed one had a finite logit.
    error_ = constraint->accept(id);
    if (!error_) {
      finish_reason_ = "error";
      return false;
    }
  }
  // Under a constraint an end token always ends the output: the grammar allowed it there.
  if ((constraint || !opt_.ignore_eos) && tok_.is_end_of_generation(id)) {
    finish_reason_ = "stop";
    return false;
  }
  emitted_ = true;
  ++generated_;
  *text = stops_.push(decoder_.push(id));
  if (stops_.matched() || (constraint && constraint->complete())) {
    finish_reason_ = "stop";
    return false;
  }
  if (opt_.max_tokens >= 0 && generated_ >= opt_.max_tokens) {
    finish_reason_ = "length";
    return false;
  }
  return true;
}

std::string GenerationStep::flush() {
  if (stops_.matched() || finish_reason_ == "error") return "";
  return stops_.flush(decoder_.flush());
}

}  // namespace hearth
