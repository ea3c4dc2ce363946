// Helpers for the grammar tests: whole-string matching through GrammarMatcher.
#pragma once

#include <memory>
#include <string>

#include "grammar/grammar-matcher.h"

namespace hearth::test {

// True when `text` is a complete sentence of the grammar.
inline bool grammar_matches(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  const GrammarMatcher::StateId s = m.step(m.start(), text);
  return s != GrammarMatcher::kDead && m.can_end(s);
}

// True when `text` can be continued to a sentence of the grammar (a live prefix).
inline bool grammar_prefix(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.step(m.start(), text) != GrammarMatcher::kDead;
}

}  // namespace hearth::test
