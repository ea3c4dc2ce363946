// `hearth run` with --grammar, --grammar-file, -j/--json-schema: the output follows the grammar,
// a bad grammar or schema is one error line naming it, before the model loads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "support/test-data.h"

namespace hearth {
namespace {

using test::run_command;
using test::shared_path;

std::vector<std::string> run_args(std::vector<std::string> extra) {
  std::vector<std::string> argv = {test::hearth_cli(),
                                   "run",
                                   "-m",
                                   shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"),
                                   "-p",
                                   "And the king said",
                                   "-t",
                                   "1",
                                   "--no-cache",
                                   "--json",
                                   "-n",
                                   "96",
                                   "--seed",
                                   "11"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

TEST(CliGrammar, JsonSchemaInlineAndFromFile) {
  const std::string schema =
      R"({"type":"object","properties":{"book":{"enum":["Genesis","Exodus"]},)"
      R"("chapter":{"type":"integer","minimum":1,"maximum":50}},"required":["book","chapter"]})";
  const std::string file = test::temp_dir() + "/schema.json";
  test::write_file(file, schema);
  for (const auto& flag : std::vector<std::vector<std::string>>{
           {"-j", schema}, {"--json-schema", file}, {"--json-schema-file", file}}) {
    auto r = run_command(run_args(flag));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto out = nlohmann::json::parse(r.out);
    EXPECT_EQ(out["finish_reason"], "stop");
    const auto value = nlohmann::json::parse(out["text"].get<std::string>());
    EXPECT_TRUE(value["book"] == "Genesis" || value["book"] == "Exodus") << value.dump();
    EXPECT_GE(value["chapter"].get<int>(), 1);
    EXPECT_LE(value["chapter"].get<int>(), 50);
    EXPECT_EQ(value.size(), 2u);
  }
}

TEST(CliGrammar, GbnfInlineAndFromFile) {
  const std::string g = "root ::= \"Amen\" (\", \" [a-z]{1,6}){1,3} \".\"";
  const std::string file = test::temp_dir() + "/g.gbnf";
  test::write_file(file, g + "\n");
  for (const auto& flag :
       std::vector<std::vector<std::string>>{{"--grammar", g}, {"--grammar-file", file}}) {
    auto r = run_command(run_args(flag));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string text = nlohmann::json::parse(r.out)["text"];
    EXPECT_TRUE(std::regex_match(text, std::regex("Amen(, [a-z]{1,6}){1,3}\\."))) << text;
  }
}

TEST(CliGrammar, BadGrammarsAreOneErrorLine) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--grammar", "root ::= [a-"}, "hearth: error: --grammar: grammar: line 1"},
      {{"--grammar-file", "/nonexistent.gbnf"}, "/nonexistent.gbnf"},
      {{"-j", R"({"type":"string","format":"email"})"}, "unsupported string format 'email'"},
      {{"-j", R"({"type":"object","patternProperties":{}})"},
       "unsupported keyword 'patternProperties' at #"},
      {{"--grammar", "root ::= \"a\"", "-j", "{}"}, "excludes"},
  };
  for (const auto& [flags, want] : cases) {
    auto r = run_command(run_args(flags));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("hearth: loaded"), std::string::npos) << "compiled after loading";
  }
}

}  // namespace
}  // namespace hearth
