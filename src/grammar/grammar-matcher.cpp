// grammar-matcher.h. A frame (pos, parent) is a stack whose top is at element `pos`; when pos is
// a rule reference at the end of its sequence the callee takes the caller's place (tail call),
// so right recursion (x* as rest ::= x rest | "") runs in constant stack depth.
#include "grammar/grammar-matcher.h"

#include <algorithm>

namespace hearth {

size_t GrammarMatcher::VectorHash::operator()(const std::vector<uint32_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
  return size_t(h);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  frames_.push_back({0, 0});  // id 0: the empty stack
  std::vector<uint32_t> stacks;
  expanded_.clear();
  for (uint32_t alt : g_->alternatives[g_->root]) expand(alt, 0, &stacks);
  start_ = intern_state(std::move(stacks));
}

uint32_t GrammarMatcher::intern_frame(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t(pos) << 32) | parent;
  auto [it, inserted] = frame_ids_.emplace(key, uint32_t(frames_.size()));
  if (inserted) frames_.push_back({pos, parent});
  return it->second;
}

void GrammarMatcher::expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>* out) {
  // A configuration seen before in this closure adds nothing (x?* loops back to itself).
  if (!expanded_.insert((uint64_t(pos) << 32) | parent).second) return;
  const GrammarElement& e = g_->elements[pos];
  switch (e.kind) {
    case GrammarElement::Kind::kBytes:
      out->push_back(intern_frame(pos, parent));
      return;
    case GrammarElement::Kind::kEnd:
      if (parent == 0) {
        out->push_back(0);
      } else {
        const Frame f = frames_[parent];
        expand(f.pos, f.parent, out);
      }
      return;
    case GrammarElement::Kind::kRule: {
      const bool tail = g_->elements[pos + 1].kind == GrammarElement::Kind::kEnd;
      const uint32_t below = tail ? parent : intern_frame(pos + 1, parent);
      for (uint32_t alt : g_->alternatives[e.arg]) expand(alt, below, out);
      return;
    }
  }
}

GrammarMatcher::StateId GrammarMatcher::intern_state(std::vector<uint32_t> stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty()) return kDead;
  auto it = state_ids_.find(stacks);
  if (it != state_ids_.end()) return it->second;
  const StateId id = StateId(states_.size());
  State& st = states_.emplace_back();
  st.can_end = stacks.front() == 0;
  st.can_continue = stacks.back() != 0;
  st.stacks = stacks;
  state_ids_.emplace(std::move(stacks), id);
  return id;
}

GrammarMatcher::StateId GrammarMatcher::compute_step(StateId s, uint8_t byte) {
  std::vector<uint32_t> out;
  expanded_.clear();
  for (uint32_t stack : states_[size_t(s)].stacks) {
    if (stack == 0) continue;
    const Frame f = frames_[stack];
    if (g_->byte_sets[g_->elements[f.pos].arg].has(byte)) expand(f.pos + 1, f.parent, &out);
  }
  const StateId next = intern_state(std::move(out));
  State& st = states_[size_t(s)];
  if (!st.next) {
    st.next = std::make_unique<int32_t[]>(256);
    std::fill_n(st.next.get(), 256, kUnknown);
  }
  st.next[byte] = next;
  return next;
}

GrammarMatcher::StateId GrammarMatcher::rebase(StateId keep) {
  std::vector<uint32_t> kept = states_[size_t(keep)].stacks;
  std::vector<uint32_t> start = states_[size_t(start_)].stacks;
  states_.clear();
  state_ids_.clear();
  // Frames are small and shared by the kept stacks; they stay.
  start_ = intern_state(std::move(start));
  return intern_state(std::move(kept));
}

}  // namespace hearth
