// constraint-step.h: the budget keeps constrained output completable within max_tokens and the
// context (GrammarConstraint::set_token_budget says how).
#include "runtime/constraint-step.h"

#include <algorithm>

namespace hearth {

int64_t constraint_budget(int64_t ctx_left, int64_t max_tokens, int64_t generated) {
  if (max_tokens < 0) return ctx_left;
  return std::min(ctx_left, max_tokens - generated);
}

void constrain_logits(TokenConstraint* constraint, int64_t tokens_left, std::span<float> logits) {
  if (!constraint) return;
  constraint->set_token_budget(tokens_left);
  constraint->mask(logits);
}

Status constraint_accept(TokenConstraint* constraint, int32_t token) {
  return constraint ? constraint->accept(token) : Status::ok();
}

bool end_token_ends(const TokenConstraint* constraint, bool ignore_eos) {
  return constraint != nullptr || !ignore_eos;
}

bool constraint_complete(const TokenConstraint* constraint) {
  return constraint != nullptr && constraint->complete();
}

}  // namespace hearth
