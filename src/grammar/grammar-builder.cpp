// grammar-builder.h. The checks run on the rule graph before flattening: a grammar that passes
// them can always be finished from any state the matcher reaches (every rule is productive),
// and expanding a state always terminates (no rule can reach itself without consuming a byte).
#include "grammar/grammar-builder.h"

#include <algorithm>

namespace hearth {

uint32_t GrammarBuilder::rule_id(const std::string& name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const uint32_t id = uint32_t(names_.size());
  names_.push_back(name);
  rules_.emplace_back();
  defined_.push_back(false);
  ids_[name] = id;
  return id;
}

uint32_t GrammarBuilder::new_helper_rule(const std::string& base) {
  for (size_t n = names_.size();; ++n) {
    const std::string name = base + "_" + std::to_string(n);
    if (!ids_.count(name)) return rule_id(name);
  }
}

void GrammarBuilder::define(uint32_t rule, std::vector<Sequence> alternatives) {
  rules_[rule] = std::move(alternatives);
  defined_[rule] = true;
}

uint32_t GrammarBuilder::byte_set_id(const ByteSet& set) {
  auto [it, inserted] = set_ids_.emplace(set.bits, uint32_t(sets_.size()));
  if (inserted) sets_.push_back(set);
  return it->second;
}

Status GrammarBuilder::count(size_t n) {
  symbols_ += n;
  if (symbols_ > limits_.max_elements)
    return Status::error("more than " + std::to_string(limits_.max_elements) +
                         " elements (repetitions expand into copies)");
  return Status::ok();
}

void GrammarBuilder::append_literal(const std::vector<uint8_t>& bytes, Sequence* seq) {
  for (uint8_t b : bytes) {
    ByteSet s;
    s.add(b);
    seq->push_back({false, byte_set_id(s)});
  }
  symbols_ += bytes.size();
}

Status GrammarBuilder::append_class(const std::vector<CodepointRange>& ranges, Sequence* seq) {
  const auto seqs = utf8_sequences(ranges);
  if (seqs.empty()) return Status::error("a character class matches no character");
  // Single-byte encodings share one byte set; longer ones become alternatives of a helper rule.
  ByteSet ascii;
  bool any_ascii = false, any_long = false;
  for (const auto& s : seqs) {
    if (s.size() == 1) {
      ascii.add_range(s[0].first, s[0].second);
      any_ascii = true;
    } else {
      any_long = true;
    }
  }
  if (!any_long) {
    seq->push_back({false, byte_set_id(ascii)});
    return count(1);
  }
  auto it = class_rules_.find(seqs);
  if (it == class_rules_.end()) {
    std::vector<Sequence> alts;
    if (any_ascii) alts.push_back({{false, byte_set_id(ascii)}});
    for (const auto& s : seqs) {
      if (s.size() == 1) continue;
      Sequence alt;
      for (const auto& [lo, hi] : s) {
        ByteSet b;
        b.add_range(lo, hi);
        alt.push_back({false, byte_set_id(b)});
      }
      HEARTH_TRY(count(alt.size()));
      alts.push_back(std::move(alt));
    }
    const uint32_t r = new_helper_rule("char");
    define(r, std::move(alts));
    it = class_rules_.emplace(seqs, r).first;
  }
  seq->push_back({true, it->second});
  return count(1);
}

GrammarBuilder::Symbol GrammarBuilder::group(std::vector<Sequence> alternatives) {
  const uint32_t r = new_helper_rule("group");
  define(r, std::move(alternatives));
  return {true, r};
}

Status GrammarBuilder::apply_repetition(Sequence* seq, size_t start, uint32_t min, uint32_t max) {
  if (start >= seq->size()) return Status::error("a repetition operator follows nothing");
  if (min > limits_.max_repetition || (max != kUnbounded && max > limits_.max_repetition))
    return Status::error("repetition count above " + std::to_string(limits_.max_repetition));
  if (max != kUnbounded && max < min)
    return Status::error("repetition {" + std::to_string(min) + "," + std::to_string(max) +
                         "} has max < min");
  Symbol item = (*seq)[start];
  if (seq->size() - start > 1) item = group({Sequence(seq->begin() + long(start), seq->end())});
  seq->resize(start);
  HEARTH_TRY(count(size_t(min) + (max == kUnbounded ? 2 : size_t(max - min) * 2)));
  for (uint32_t i = 0; i < min; ++i) seq->push_back(item);
  if (max == kUnbounded) {
    // rest ::= item rest | (empty): right recursion, which the matcher runs as a loop.
    const uint32_t rest = new_helper_rule("repeat");
    define(rest, {{item, {true, rest}}, {}});
    seq->push_back({true, rest});
  } else if (max > min) {
    // opt_k ::= item opt_{k-1} | (empty), nested so each optional copy is one more level.
    uint32_t inner = new_helper_rule("repeat");
    define(inner, {{item}, {}});
    for (uint32_t k = min + 1; k < max; ++k) {
      const uint32_t outer = new_helper_rule("repeat");
      define(outer, {{item, {true, inner}}, {}});
      inner = outer;
    }
    seq->push_back({true, inner});
  }
  return Status::ok();
}

Result<Grammar> GrammarBuilder::finish(const std::string& root_name) {
  auto root_it = ids_.find(root_name);
  if (root_it == ids_.end() || !defined_[root_it->second])
    return Status::error("no rule named '" + root_name + "'");
  const size_t n = rules_.size();
  for (size_t r = 0; r < n; ++r) {
    if (!defined_[r]) return Status::error("rule '" + names_[r] + "' is not defined");
  }
  // Reachable rules only: an unused broken rule is harmless.
  std::vector<bool> reachable(n, false);
  std::vector<uint32_t> todo = {root_it->second};
  reachable[root_it->second] = true;
  while (!todo.empty()) {
    const uint32_t r = todo.back();
    todo.pop_back();
    for (const auto& alt : rules_[r])
      for (const auto& s : alt)
        if (s.is_rule && !reachable[s.id]) reachable[s.id] = true, todo.push_back(s.id);
  }
  // Productive: some alternative consists of productive symbols (a finite string exists).
  // Nullable: some alternative matches the empty string.
  auto fixed_point = [&](bool nullable) {
    std::vector<bool> ok(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (ok[r]) continue;
        for (const auto& alt : rules_[r]) {
          bool all = true;
          for (const auto& s : alt) all = all && (s.is_rule ? bool(ok[s.id]) : !nullable);
          if (all) {
            ok[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    return ok;
  };
  const auto productive = fixed_point(false);
  const auto nullable = fixed_point(true);
  for (size_t r = 0; r < n; ++r) {
    if (reachable[r] && !productive[r])
      return Status::error("rule '" + names_[r] +
                           "' can never finish (every alternative recurses without end)");
  }
  // Left recursion: a rule reaching itself through leading (nullable-prefixed) references. A
  // cycle made only of tail references (rest ::= x? rest) keeps the stack depth, and the
  // matcher's closure stops at configurations it has seen; a cycle through a reference with
  // symbols after it would push a frame on every turn, forever. So: strongly connected
  // components of the leading-reference graph, and no non-tail edge inside one.
  struct Edge {
    uint32_t to;
    bool tail;
  };
  std::vector<std::vector<Edge>> edges(n);
  for (size_t r = 0; r < n; ++r) {
    if (!reachable[r]) continue;
    for (const auto& alt : rules_[r]) {
      for (size_t i = 0; i < alt.size(); ++i) {
        if (!alt[i].is_rule) break;
        edges[r].push_back({alt[i].id, i + 1 == alt.size()});
        if (!nullable[alt[i].id]) break;
      }
    }
  }
  // Tarjan's algorithm, iterative (helper rules can nest thousands deep).
  std::vector<int32_t> index(n, -1), low(n, 0), component(n, -1);
  std::vector<uint8_t> on_stack(n, 0);
  std::vector<uint32_t> stack;
  int32_t counter = 0, components = 0;
  struct Visit {
    uint32_t rule;
    size_t next_edge;
  };
  for (size_t root = 0; root < n; ++root) {
    if (!reachable[root] || index[root] >= 0) continue;
    std::vector<Visit> calls = {{uint32_t(root), 0}};
    index[root] = low[root] = counter++;
    stack.push_back(uint32_t(root));
    on_stack[root] = 1;
    while (!calls.empty()) {
      Visit& v = calls.back();
      if (v.next_edge < edges[v.rule].size()) {
        const uint32_t w = edges[v.rule][v.next_edge++].to;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = 1;
          calls.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v.rule] = std::min(low[v.rule], index[w]);
        }
        continue;
      }
      const uint32_t u = v.rule;
      calls.pop_back();
      if (!calls.empty()) low[calls.back().rule] = std::min(low[calls.back().rule], low[u]);
      if (low[u] == index[u]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = 0;
          component[w] = components;
        } while (w != u);
        ++components;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    for (const Edge& e : edges[r]) {
      if (!e.tail && component[e.to] == component[r])
        return Status::error("rule '" + names_[e.to] +
                             "' is left-recursive (it can reach itself without matching a byte)");
    }
  }

  Grammar g;
  g.rule_names = names_;
  g.byte_sets = std::move(sets_);
  g.root = root_it->second;
  g.alternatives.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (const auto& alt : rules_[r]) {
      g.alternatives[r].push_back(uint32_t(g.elements.size()));
      for (const auto& s : alt)
        g.elements.push_back(
            {s.is_rule ? GrammarElement::Kind::kRule : GrammarElement::Kind::kBytes, s.id});
      g.elements.push_back({GrammarElement::Kind::kEnd, 0});
    }
  }
  return g;
}

}  // namespace hearth
