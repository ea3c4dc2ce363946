// output-format-args.h: reads the grammar or schema text (inline or from a file) and compiles it.
#include "output-format-args.h"

#include "base/mapped-file.h"
#include "command.h"

namespace hearth::cli {

void add_output_format_options(CLI::App* cmd, OutputFormatArgs* a) {
  auto* g = cmd->add_option("--grammar", a->grammar, "constrain the output to a GBNF grammar");
  auto* gf = cmd->add_option("--grammar-file", a->grammar_file, "... read from a file");
  auto* j = cmd->add_option("-j,--json-schema", a->json_schema,
                            "constrain the output to a JSON Schema (inline JSON or a file); "
                            "'{\"type\":\"object\"}' for any JSON object");
  auto* jf = cmd->add_option("--json-schema-file", a->json_schema_file, "... read from a file");
  g->excludes(gf)->excludes(j)->excludes(jf);
  gf->excludes(j)->excludes(jf);
  j->excludes(jf);
}

std::shared_ptr<const Grammar> output_grammar_or_exit(const OutputFormatArgs& a) {
  OutputFormat f;
  std::string where;
  if (!a.grammar.empty()) {
    f = {OutputFormat::Kind::kGbnf, a.grammar};
    where = "--grammar";
  } else if (!a.grammar_file.empty()) {
    f = {OutputFormat::Kind::kGbnf, check(read_text_file(a.grammar_file))};
    where = a.grammar_file;
  } else if (!a.json_schema.empty() || !a.json_schema_file.empty()) {
    // -j takes JSON text when it looks like JSON, else a file name.
    std::string text = a.json_schema;
    where = "--json-schema";
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (!a.json_schema_file.empty() || first == std::string::npos ||
        (text[first] != '{' && text[first] != '[' && text != "true")) {
      where = a.json_schema_file.empty() ? a.json_schema : a.json_schema_file;
      text = check(read_text_file(where));
    }
    f = {OutputFormat::Kind::kJsonSchema, text};
  } else {
    return nullptr;
  }
  auto grammar = compile_output_format(f);
  if (!grammar) fail(grammar.status().with_context(where));
  return grammar.value();
}

}  // namespace hearth::cli
