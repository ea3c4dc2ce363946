// grammar-constraint.h. The trie walk is depth-first with an explicit stack of (trie node,
// matcher state); a byte the grammar rejects skips the whole subtree below it.
#include "grammar/grammar-constraint.h"

#include <algorithm>
#include <cmath>

namespace hearth {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const TokenVocabulary> vocab,
                                     const GrammarConstraintOptions& options)
    : vocab_(std::move(vocab)), options_(options), matcher_(std::move(grammar)) {
  state_ = matcher_.start();
}

void GrammarConstraint::compute_allowed(uint32_t limit, Mask* mask) {
  std::vector<uint64_t>& bits = mask->bits;
  bits.assign((size_t(vocab_->n_vocab) + 63) / 64, 0);
  mask->max_distance = 0;
  if (ended_) return;
  auto set = [&](int32_t id) { bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63); };
  if (matcher_.can_end(state_)) {
    for (int32_t id : vocab_->end_ids) set(id);
  }
  const auto& nodes = vocab_->trie.nodes();
  const auto& ids = vocab_->trie.token_ids();
  // Depth-first over the preorder array: each level walks its children through the sibling
  // links with the transitions of the state reached at that level.
  struct Level {
    uint32_t child, end;
    const int32_t* table;
    GrammarMatcher::StateId state;
  };
  std::vector<Level> todo = {{1, nodes[0].end, matcher_.transitions(state_), state_}};
  uint64_t visited = 0;
  while (!todo.empty()) {
    Level& level = todo.back();
    if (level.child >= level.end) {
      todo.pop_back();
      continue;
    }
    const uint32_t c = level.child;
    const TokenTrie::Node& child = nodes[c];
    level.child = child.end;
    ++visited;
    GrammarMatcher::StateId next = level.table[child.byte];
    if (next == GrammarMatcher::kUnknown) next = matcher_.step_uncached(level.state, child.byte);
    if (next == GrammarMatcher::kDead) continue;
    if (child.n_tokens) {
      const uint32_t d = matcher_.distance(next);
      if (d <= limit) {
        mask->max_distance = std::max(mask->max_distance, d);
        for (uint32_t t = child.first_token; t < child.first_token + child.n_tokens; ++t)
          set(ids[t]);
      }
    }
    if (child.end > c + 1) todo.push_back({c + 1, child.end, matcher_.transitions(next), next});
  }
  stats_.trie_nodes_visited += visited;
}

const std::vector<uint64_t>& GrammarConstraint::allowed() {
  ++stats_.masks;
  auto it = cache_.find(state_);
  if (it != cache_.end()) {
    ++stats_.cache_hits;
  } else {
    if (cache_.size() >= options_.max_cached_masks) cache_.clear();
    if (matcher_.state_count() > options_.max_matcher_states) {
      state_ = matcher_.rebase(state_);  // state ids change: cached masks refer to old ones
      cache_.clear();
      budget_key_ = -1;
    }
    it = cache_.emplace(state_, Mask{}).first;
    compute_allowed(UINT32_MAX, &it->second);
  }
  const Mask& free = it->second;
  if (tokens_left_ < 0 || int64_t(free.max_distance) + 2 <= tokens_left_) return free.bits;
  // The budget binds: only tokens after which the rest still fits.
  const int64_t key = (int64_t(state_) << 32) | uint32_t(std::max<int64_t>(tokens_left_, 0));
  if (key != budget_key_) {
    compute_allowed(
        tokens_left_ < 2 ? 0 : uint32_t(std::min<int64_t>(tokens_left_ - 2, UINT32_MAX)),
        &budget_mask_);
    if (tokens_left_ < 2) {  // no room for another byte: only the end token, where allowed
      std::fill(budget_mask_.bits.begin(), budget_mask_.bits.end(), 0);
      if (matcher_.can_end(state_))
        for (int32_t id : vocab_->end_ids)
          budget_mask_.bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
    }
    // A budget below the grammar's shortest completion (a long fixed call syntax under a small
    // max_tokens) would allow nothing; then the tokens that get closest to the end are allowed,
    // and the output ends by length, unfinished, instead of with a token the grammar refuses.
    const bool none = std::all_of(budget_mask_.bits.begin(), budget_mask_.bits.end(),
                                  [](uint64_t w) { return w == 0; });
    if (none && matcher_.distance(state_) > 0)
      compute_allowed(matcher_.distance(state_) - 1, &budget_mask_);
    budget_key_ = key;
  }
  return budget_mask_.bits;
}

bool GrammarConstraint::allows(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab) return false;
  return (allowed()[size_t(token) >> 6] >> (token & 63)) & 1;
}

void GrammarConstraint::mask(std::span<float> logits) {
  const std::vector<uint64_t>& bits = allowed();
  const size_t n = std::min(logits.size(), size_t(vocab_->n_vocab));
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits[w];
    if (word == ~uint64_t(0)) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i)
      if (!((word >> (i & 63)) & 1)) logits[i] = -INFINITY;
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = -INFINITY;
}

Status GrammarConstraint::accept(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab)
    return Status::error("grammar: token id " + std::to_string(token) +
                         " is outside the vocabulary");
  if (ended_) return Status::error("grammar: a token after the end of the output");
  if (vocab_->ends_generation[size_t(token)]) {
    if (!matcher_.can_end(state_))
      return Status::error("grammar: end of generation before the grammar is complete");
    ended_ = true;
    return Status::ok();
  }
  const std::string& bytes = vocab_->bytes[size_t(token)];
  const GrammarMatcher::StateId next =
      bytes.empty() ? GrammarMatcher::kDead : matcher_.step(state_, bytes);
  // A step past the matcher's bound refused some continuations the grammar allows: the output
  // would be silently narrower than asked, so the generation stops with this error instead.
  if (matcher_.too_large())
    return Status::error("grammar: too large to match past this point (a step reaches more than " +
                         std::to_string(GrammarMatcher::kMaxClosure) + " parser configurations)");
  if (next == GrammarMatcher::kDead)
    return Status::error("grammar: token " + std::to_string(token) +
                         " is not allowed by the grammar here");
  state_ = next;
  return Status::ok();
}

}  // namespace hearth
