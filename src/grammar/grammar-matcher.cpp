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

namespace {

constexpr uint32_t kFar = 1u << 30;  // saturating "infinity" for lengths

uint32_t add_lengths(uint32_t a, uint32_t b) {
  return std::min(kFar, a + b);
}

// Shortest string of each rule (a fixed point; the builder guarantees it is finite for every
// reachable rule), then of each element's rest of sequence.
std::vector<uint32_t> suffix_lengths(const Grammar& g) {
  std::vector<uint32_t> rule(g.alternatives.size(), kFar), suffix(g.elements.size(), 0);
  auto compute_suffixes = [&] {
    for (size_t i = g.elements.size(); i-- > 0;) {
      const GrammarElement& e = g.elements[i];
      if (e.kind == GrammarElement::Kind::kEnd)
        suffix[i] = 0;
      else
        suffix[i] =
            add_lengths(e.kind == GrammarElement::Kind::kBytes ? 1 : rule[e.arg], suffix[i + 1]);
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    compute_suffixes();
    for (size_t r = 0; r < rule.size(); ++r) {
      for (uint32_t alt : g.alternatives[r]) {
        if (suffix[alt] < rule[r]) rule[r] = suffix[alt], changed = true;
      }
    }
  }
  return suffix;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  suffix_length_ = suffix_lengths(*g_);
  frames_.push_back({0, 0});  // id 0: the empty stack
  frame_distance_.push_back(0);
  std::vector<uint32_t> stacks;
  expanded_.clear();
  closure_over_ = false;
  for (uint32_t alt : g_->alternatives[g_->root]) expand(alt, 0, &stacks);
  start_ = closure_over_ ? kDead : intern_state(std::move(stacks));
}

uint32_t GrammarMatcher::intern_frame(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t(pos) << 32) | parent;
  auto [it, inserted] = frame_ids_.emplace(key, uint32_t(frames_.size()));
  if (inserted) {
    frames_.push_back({pos, parent});
    frame_distance_.push_back(add_lengths(suffix_length_[pos], frame_distance_[parent]));
  }
  return it->second;
}

void GrammarMatcher::expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>* out) {
  // A worklist, not recursion: a client's x{0,9999} nested a few deep chains hundreds of
  // thousands of optional elements, and the closure walked them one stack frame each (it
  // overflowed a server thread's stack). The set of stacks reached is the same in any order.
  std::vector<Frame>& work = expand_work_;
  work.clear();
  work.push_back({pos, parent});
  while (!work.empty()) {
    const Frame at = work.back();
    work.pop_back();
    // A configuration seen before in this closure adds nothing (x?* loops back to itself).
    if (!expanded_.insert((uint64_t(at.pos) << 32) | at.parent).second) continue;
    if (expanded_.size() > kMaxClosure || frames_.size() > kMaxFrames) {
      closure_over_ = too_large_ = true;
      work.clear();
      return;
    }
    const GrammarElement& e = g_->elements[at.pos];
    switch (e.kind) {
      case GrammarElement::Kind::kBytes:
        out->push_back(intern_frame(at.pos, at.parent));
        break;
      case GrammarElement::Kind::kEnd:
        if (at.parent == 0)
          out->push_back(0);
        else
          work.push_back(frames_[at.parent]);
        break;
      case GrammarElement::Kind::kRule: {
        const bool tail = g_->elements[at.pos + 1].kind == GrammarElement::Kind::kEnd;
        const uint32_t below = tail ? at.parent : intern_frame(at.pos + 1, at.parent);
        const auto& alts = g_->alternatives[e.arg];
        for (auto a = alts.rbegin(); a != alts.rend(); ++a) work.push_back({*a, below});
        break;
      }
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
  st.distance = kFar;
  for (uint32_t stack : stacks) st.distance = std::min(st.distance, frame_distance_[stack]);
  distances_.push_back(st.distance);
  st.stacks = stacks;
  state_ids_.emplace(std::move(stacks), id);
  return id;
}

GrammarMatcher::StateId GrammarMatcher::compute_step(StateId s, uint8_t byte) {
  std::vector<uint32_t> out;
  expanded_.clear();
  closure_over_ = false;
  for (uint32_t stack : states_[size_t(s)].stacks) {
    if (stack == 0) continue;
    const Frame f = frames_[stack];
    if (g_->byte_sets[g_->elements[f.pos].arg].has(byte)) expand(f.pos + 1, f.parent, &out);
    if (closure_over_) break;
  }
  const StateId next = closure_over_ ? kDead : intern_state(std::move(out));
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
  std::vector<uint32_t> start;
  if (start_ != kDead) start = states_[size_t(start_)].stacks;
  states_.clear();
  state_ids_.clear();
  distances_.clear();
  // Frames are small and shared by the kept stacks; they stay.
  start_ = start_ == kDead ? kDead : intern_state(std::move(start));
  return intern_state(std::move(kept));
}

}  // namespace hearth
