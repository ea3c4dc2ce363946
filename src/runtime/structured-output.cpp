// structured-output.h: JSON Schema goes to GBNF text first (json-schema.h), so every format
// ends in the one GBNF parser and matcher.
#include "runtime/structured-output.h"

#include "grammar/grammar-constraint.h"
#include "grammar/json-schema.h"

namespace hearth {

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
  auto grammar = parse_gbnf(gbnf);
  if (!grammar) {
    if (format.kind == OutputFormat::Kind::kGbnf) return grammar.status();
    // A converter output the parser refuses (a repetition over the limit, ...).
    return Status::error("JSON Schema: " + grammar.message());
  }
  return std::shared_ptr<const Grammar>(std::make_shared<Grammar>(std::move(grammar.value())));
}

std::shared_ptr<TokenConstraint> make_constraint(const Engine& engine,
                                                 std::shared_ptr<const Grammar> grammar) {
  return std::make_shared<GrammarConstraint>(std::move(grammar), engine.token_vocabulary());
}

}  // namespace hearth
