// A constraint on which tokens may come next (a grammar, a JSON Schema): the generation loop
// calls mask() on the logits before the sampler chain runs, and accept() with the token it
// picked, so the constraint composes with every sampling stage. One object per generation.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace hearth {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of the tokens not allowed next to -inf (end-of-generation tokens are allowed
  // exactly when the output may end here). Ids past the vocabulary are never allowed.
  virtual void mask(std::span<float> logits) = 0;
  // Advances past `token`; an error (and no change) when the constraint does not allow it.
  virtual Status accept(int32_t token) = 0;
  // True when no token can extend the output any further: generation should end.
  virtual bool complete() const = 0;
  // True when the output so far is a complete match (ending here is allowed).
  virtual bool can_end() const = 0;
  // How many more tokens generation may take (-1: no limit), told before each mask(). A
  // constraint may then narrow its mask so that the output still completes in time.
  virtual void set_token_budget(int64_t tokens_left) { (void)tokens_left; }
};

}  // namespace hearth
