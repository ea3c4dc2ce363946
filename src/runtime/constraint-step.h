// The constraint's part of one decoding step, shared by Session::generate and the server's
// scheduler (which runs its own batched loop, one constraint per slot): before the sampler chain
// the token budget and the mask; after it, following the picked token. Every function takes a
// null constraint as "unconstrained".
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "sampling/token-constraint.h"

namespace hearth {

// Tokens the output may still take, this step's included: what the context still holds
// (`ctx_left` positions), capped by what is left of `max_tokens` (-1: no cap).
int64_t constraint_budget(int64_t ctx_left, int64_t max_tokens, int64_t generated);

// Before sampling: tells the constraint its budget and sets the logits (one row of n_vocab) of
// the tokens it does not allow to -inf, so every sampling stage sees only allowed tokens.
void constrain_logits(TokenConstraint* constraint, int64_t tokens_left, std::span<float> logits);

// After sampling: follows the picked token. An error when the constraint refuses it (the sampler
// only picks a masked-out token when no allowed one had a finite logit).
Status constraint_accept(TokenConstraint* constraint, int32_t token);

// Whether an end-of-generation token ends the output: always under a constraint (the grammar
// decides where the output may end, and allowed it), else unless ignore_eos.
bool end_token_ends(const TokenConstraint* constraint, bool ignore_eos);

// After a token's text is out: true when nothing can follow (generation ends with "stop").
bool constraint_complete(const TokenConstraint* constraint);

}  // namespace hearth
