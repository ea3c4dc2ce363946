// Constrained-output flags with llama.cpp's names (--grammar, --grammar-file, -j/--json-schema,
// --json-schema-file), shared by the commands that generate.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "runtime/structured-output.h"

namespace hearth::cli {

struct OutputFormatArgs {
  std::string grammar, grammar_file, json_schema, json_schema_file;
};

void add_output_format_options(CLI::App* cmd, OutputFormatArgs* args);
// The compiled grammar the flags ask for, or nullptr when none was given; exits with one error
// line (naming the file, the grammar line or the schema keyword) when it does not compile.
std::shared_ptr<const Grammar> output_grammar_or_exit(const OutputFormatArgs& args);

}  // namespace hearth::cli
