// Runs a Grammar over bytes. A position in the grammar is a set of pushdown stacks (frames are
// hash-consed, so a stack is one id); each distinct set becomes a state of a lazily built DFA
// whose transitions are cached, so a walk over the vocabulary trie mostly reads a table.
#pragma once

#include <deque>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"

namespace hearth {

class GrammarMatcher {
 public:
  using StateId = int32_t;
  static constexpr StateId kDead = -1;

  // The most (position, stack) configurations one step's closure may visit, and the most stack
  // frames a matcher keeps. Real grammars stay far below (a JSON Schema's closures are tens);
  // optional repetitions of items that can themselves match nothing, nested ((a{0,100}){0,100}
  // ...), multiply their lengths in a closure. Past the bound the step is refused (kDead) and
  // too_large() says so, rather than one request computing for minutes.
  static constexpr size_t kMaxClosure = size_t(1) << 18;
  static constexpr size_t kMaxFrames = size_t(1) << 22;

  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // True once a closure ran past kMaxClosure or kMaxFrames (the start state's included: then
  // start() is kDead).
  bool too_large() const { return too_large_; }
  StateId start() const { return start_; }
  // The state after `byte`, or kDead when the grammar does not allow it.
  StateId step(StateId s, uint8_t byte) {
    int32_t* next = states_[size_t(s)].next.get();
    if (next && next[byte] != kUnknown) return next[byte];
    return compute_step(s, byte);
  }
  // The 256 transitions of s for a loop over many bytes from one state; an entry may be
  // kUnknown, which step_uncached() fills. Valid until rebase().
  const int32_t* transitions(StateId s) {
    State& st = states_[size_t(s)];
    if (!st.next) {
      st.next = std::make_unique<int32_t[]>(256);
      std::fill_n(st.next.get(), 256, kUnknown);
    }
    return st.next.get();
  }
  StateId step_uncached(StateId s, uint8_t byte) { return compute_step(s, byte); }
  static constexpr int32_t kUnknown = -2;

  StateId step(StateId s, std::string_view bytes) {
    for (char c : bytes) {
      if (s == kDead) break;
      s = step(s, uint8_t(c));
    }
    return s;
  }
  bool can_end(StateId s) const { return states_[size_t(s)].can_end; }            // input complete
  bool can_continue(StateId s) const { return states_[size_t(s)].can_continue; }  // more bytes
  // The fewest bytes that complete the input from state s (0 when it can end).
  uint32_t distance(StateId s) const { return distances_[size_t(s)]; }

  size_t state_count() const { return states_.size(); }
  // Drops every cached state and transition; returns `keep`'s new id (start() gets one too).
  // Bounds memory on long generations through many distinct states.
  StateId rebase(StateId keep);

 private:
  struct State {
    std::vector<uint32_t> stacks;     // sorted ids; 0 is the empty stack (the grammar is complete)
    std::unique_ptr<int32_t[]> next;  // 256 transitions, allocated on the first step
    bool can_end = false, can_continue = false;
    uint32_t distance = 0;
  };
  struct Frame {
    uint32_t pos;     // next element to match
    uint32_t parent;  // frame below (0: none)
  };
  struct VectorHash {
    size_t operator()(const std::vector<uint32_t>& v) const;
  };

  StateId compute_step(StateId s, uint8_t byte);
  StateId intern_state(std::vector<uint32_t> stacks);
  uint32_t intern_frame(uint32_t pos, uint32_t parent);
  // Adds the stacks reachable from "at pos, with `parent` below" whose top is a byte element
  // (or 0 when the grammar can end there). Callers clear expanded_ and closure_over_ first;
  // closure_over_ set after means the closure passed a bound and its stacks must be dropped.
  void expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>* out);

  std::shared_ptr<const Grammar> g_;
  std::vector<Frame> frames_;
  std::vector<uint32_t> frame_distance_;  // fewest bytes to empty each frame's stack
  std::vector<uint32_t> suffix_length_;   // fewest bytes from an element to its sequence's end
  std::unordered_map<uint64_t, uint32_t> frame_ids_;
  std::unordered_set<uint64_t> expanded_;  // (pos, parent) seen in the current closure
  std::vector<Frame> expand_work_;         // expand()'s worklist, kept to reuse its memory
  bool closure_over_ = false;              // the current closure passed a bound: discard it
  bool too_large_ = false;
  std::deque<State> states_;
  std::vector<uint32_t> distances_;  // State::distance, flat for the trie walk's inner loop  //
                                     // deque: references stay valid while states are added
  std::unordered_map<std::vector<uint32_t>, StateId, VectorHash> state_ids_;
  StateId start_ = kDead;
};

}  // namespace hearth
