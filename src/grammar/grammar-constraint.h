// TokenConstraint over a Grammar and a vocabulary: the allowed tokens of a state come from one
// walk of the vocabulary trie against the matcher, cached per grammar state (JSON keeps
// returning to the same few states: inside a string, after a comma, ...).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar-matcher.h"
#include "grammar/token-trie.h"
#include "sampling/token-constraint.h"

namespace hearth {

struct GrammarConstraintOptions {
  size_t max_cached_masks = 1024;       // per-state allowed-token sets kept for reuse
  size_t max_matcher_states = 1 << 14;  // DFA states (1 KiB of transitions each) before the
                                        // matcher's cache is rebuilt
};

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                    std::shared_ptr<const TokenVocabulary> vocab,
                    const GrammarConstraintOptions& options = {});

  void mask(std::span<float> logits) override;
  Status accept(int32_t token) override;
  bool complete() const override { return ended_ || !matcher_.can_continue(state_); }
  bool can_end() const override { return ended_ || matcher_.can_end(state_); }
  // With a budget of L tokens (this one included), a token is allowed only if the fewest bytes
  // that complete the grammar after it are at most L - 2 (one token per byte, plus the end
  // token). A single-byte token on the shortest way out always qualifies (byte-fallback and
  // byte-level vocabularies have one per byte), so once the budget binds the output still
  // completes within it. Usually the budget is far and the per-state mask is used as it is.
  void set_token_budget(int64_t tokens_left) override { tokens_left_ = tokens_left; }

  // The allowed tokens now, one bit per id (bit i of word i / 64).
  const std::vector<uint64_t>& allowed();
  bool allows(int32_t token);

  struct Stats {
    uint64_t masks = 0, cache_hits = 0, trie_nodes_visited = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Mask {
    std::vector<uint64_t> bits;
    uint32_t max_distance = 0;  // the largest distance to the end after an allowed token
  };
  // Tokens allowed now whose distance to the end afterwards is at most `limit`.
  void compute_allowed(uint32_t limit, Mask* mask);

  std::shared_ptr<const TokenVocabulary> vocab_;
  GrammarConstraintOptions options_;
  GrammarMatcher matcher_;
  GrammarMatcher::StateId state_;
  bool ended_ = false;  // an end-of-generation token was accepted
  int64_t tokens_left_ = -1;
  std::unordered_map<GrammarMatcher::StateId, Mask> cache_;  // masks without a budget
  Mask budget_mask_;  // the last mask the budget narrowed, and its key
  int64_t budget_key_ = -1;
  Stats stats_;
};

}  // namespace hearth
