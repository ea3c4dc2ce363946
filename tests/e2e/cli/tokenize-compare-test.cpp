// `hearth tokenize --compare tokenizer.json`: llama.cpp's GPT-2 vocabulary GGUF against a
// tokenizer.json written from the same tokens and merges passes; one whose pre-tokenizer also
// splits digits fails with the differing texts and ids; bad paths are one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using nlohmann::json;
using test::run_command;

// tokenizer.json holding the GGUF's vocabulary under the given pre_tokenizer.
std::string write_tokenizer_json(const std::string& name, const json& pre_tokenizer) {
  auto g = GgufFile::open(test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf"));
  EXPECT_TRUE(g.is_ok()) << g.message();
  const auto tokens = g->get_string_array("tokenizer.ggml.tokens").value().value();
  const auto merges = g->get_string_array("tokenizer.ggml.merges").value().value();
  const auto types = g->get_int_array("tokenizer.ggml.token_type").value().value();
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 3)
      added.push_back({{"id", i}, {"content", tokens[i]}, {"special", true}});
    else
      vocab[tokens[i]] = i;
  }
  const std::string dir = test::temp_dir() + "/" + name;
  std::filesystem::create_directories(dir);
  json tok = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
              {"pre_tokenizer", pre_tokenizer},
              {"added_tokens", added}};
  test::write_file(dir + "/tokenizer.json", tok.dump());
  return dir + "/tokenizer.json";
}

const json kByteLevel = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};

TEST(TokenizeCompare, SameVocabularyPasses) {
  const std::string ref = write_tokenizer_json("same", kByteLevel);
  const std::string gguf = test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf");
  auto r = run_command({test::hearth_cli(), "tokenize", "-m", gguf, "--compare", ref});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS: 40 of 40 texts"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("mismatch"), std::string::npos) << r.out;

  const std::string corpus = test::temp_dir() + "/corpus.txt";
  test::write_file(corpus, "first line\nsecond  line 12345\n");
  r = run_command(
      {test::hearth_cli(), "tokenize", "-m", gguf, "--compare", ref, "--corpus", corpus});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS: 3 of 3 texts"), std::string::npos) << r.out;
}

TEST(TokenizeCompare, DifferentPreTokenizerFailsNamingTheTexts) {
  const json digits_first = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, kByteLevel}}};
  const std::string ref = write_tokenizer_json("digits", digits_first);
  const std::string corpus = test::temp_dir() + "/digits.txt";
  test::write_file(corpus, "no numbers here\nyear 2024\n");
  auto r = run_command({test::hearth_cli(), "tokenize", "-m",
                        test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf"), "--compare", ref,
                        "--corpus", corpus});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("mismatch: \"year 2024\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("mismatch: \"no numbers here\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL: 1 of 3 texts"), std::string::npos) << r.out;
}

TEST(TokenizeCompare, BadInputIsOneLineError) {
  const std::string gguf = test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf");
  auto r = run_command({test::hearth_cli(), "tokenize", "-m", gguf, "--compare",
                        test::temp_dir() + "/missing/tokenizer.json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("hearth: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing/tokenizer.json"), std::string::npos) << r.err;
  // The existing flags keep their meaning: -p still prints ids.
  r = run_command({test::hearth_cli(), "tokenize", "-m", gguf, "-p", "Hello world", "--no-bos"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "15496 995\n");
}

}  // namespace
}  // namespace hearth
