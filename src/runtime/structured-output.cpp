// structured-output.h: JSON Schema goes to GBNF text first (json-schema.h), so every format
// ends in the one GBNF parser and matcher.
#include "runtime/structured-output.h"

#include <algorithm>

#include "grammar/grammar-constraint.h"
#include "grammar/grammar-matcher.h"
#include "grammar/json-schema.h"

namespace hearth {

namespace {

// Steps the start state and the states its first byte reaches (up to 16) through every byte.
bool probe_too_large(const std::shared_ptr<const Grammar>& grammar) {
  GrammarMatcher m(grammar);
  std::vector<GrammarMatcher::StateId> level = {m.start()}, next;
  for (int depth = 0; depth < 2 && !m.too_large(); ++depth) {
    next.clear();
    for (GrammarMatcher::StateId s : level)
      for (int b = 0; b < 256 && !m.too_large(); ++b) {
        const GrammarMatcher::StateId t = m.step(s, uint8_t(b));
        if (t != GrammarMatcher::kDead && next.size() < 16 &&
            std::find(next.begin(), next.end(), t) == next.end())
          next.push_back(t);
      }
    level.swap(next);
  }
  return m.too_large();
}

}  // namespace

Result<std::shared_ptr<const Grammar>> compile_output_format(const OutputFormat& format) {
  std::string gbnf;
  switch (format.kind) {
    case OutputFormat::Kind::kText:
      return Status::error("compile_output_format: plain text has no grammar");
    case OutputFormat::Kind::kGbnf:
      gbnf = format.text;
      break;
    case OutputFormat::Kind::kJsonObject:
      gbnf = json_object_gbnf();
      break;
    case OutputFormat::Kind::kJsonSchema: {
      HEARTH_ASSIGN_OR_RETURN(gbnf, json_schema_to_gbnf(format.text));
      break;
    }
  }
  // The grammar's own errors as they are; what a converter's output meets (a repetition over
  // the parser's limit, a grammar too large to match, ...) said as the schema's.
  const auto refuse = [&](const std::string& message) {
    return Status::error(format.kind == OutputFormat::Kind::kGbnf ? message
                                                                  : "JSON Schema: " + message);
  };
  auto grammar = parse_gbnf(gbnf);
  if (!grammar) return refuse(grammar.message());
  auto compiled = std::make_shared<const Grammar>(std::move(grammar.value()));
  // The start state's closure and those of the first two bytes, computed once here so that a
  // grammar too large to match is the caller's error now (a 400), not a request that fails
  // after its first tokens (a JSON Schema's string pattern starts after the opening quote).
  if (probe_too_large(compiled))
    return refuse("grammar: too large to match (its start reaches more than " +
                  std::to_string(GrammarMatcher::kMaxClosure) +
                  " parser configurations; optional repetitions of optional parts, nested, "
                  "such as (a{0,100}){0,100}, multiply)");
  return std::shared_ptr<const Grammar>(std::move(compiled));
}

std::shared_ptr<TokenConstraint> make_constraint(const Engine& engine,
                                                 std::shared_ptr<const Grammar> grammar) {
  return std::make_shared<GrammarConstraint>(std::move(grammar), engine.token_vocabulary());
}

}  // namespace hearth
