// `hearth convert` / `hearth quantize` through the real binary: progress output, --quiet, and
// bad input as ONE error line (exit code 1, "hearth: error: ", naming the path or the field).
#include <gtest/gtest.h>

#include <filesystem>

#include "formats/gguf.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using test::run_command;

std::string golden_dir(const std::string& name) {
  return test::shared_path("goldens/" + name);
}

void expect_clean_error(const std::vector<std::string>& argv, const std::string& must_mention) {
  auto r = run_command(argv);
  EXPECT_EQ(r.exit_code, 1) << "stderr: " << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
  EXPECT_EQ(r.err.rfind("hearth: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(must_mention), std::string::npos)
      << "expected '" << must_mention << "' in: " << r.err;
}

TEST(ConvertCli, ConvertShowsProgressPerTensorAndQuietSilencesIt) {
  const std::string out = test::temp_dir() + "/cli-llama2-q8_0.gguf";
  auto r = run_command(
      {test::hearth_cli(), "convert", golden_dir("llama2-tiny"), "-o", out, "--type", "q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // stderr is a pipe here: one line per tensor.
  EXPECT_NE(r.err.find("[1/21] output.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[21/21]"), std::string::npos) << r.err;
  auto f = GgufFile::open(out);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f->tensors().size(), 21u);

  const std::string quiet_out = test::temp_dir() + "/cli-llama2-quiet.gguf";
  r = run_command({test::hearth_cli(), "convert", golden_dir("llama2-tiny"), "-o", quiet_out,
                   "--type", "bf16", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST(ConvertCli, QuantizeReportsFallbacksAndTheResultLoads) {
  const std::string out = test::temp_dir() + "/cli-llama2-q6_k.gguf";
  auto r = run_command({test::hearth_cli(), "quantize",
                        golden_dir("llama2-tiny") + "/llama2-tiny-bf16.gguf", out, "Q6_K"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 96-wide rows fit no 256-element super-block: Q8_0 instead, and the log says why.
  EXPECT_NE(r.err.find("Q8_0 (row 96 does not fit Q6_K)"), std::string::npos) << r.err;
  r = run_command({test::hearth_cli(), "info", "-m", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Q8_0"), std::string::npos) << r.out;
}

TEST(ConvertCli, BadInputIsOneClearLine) {
  const std::string tmp = test::temp_dir();
  const std::string out = tmp + "/out.gguf";
  const std::string hearth = test::hearth_cli();
  expect_clean_error({hearth, "convert", golden_dir("llama2-tiny"), "-o", out, "--type", "q2_k"},
                     "unsupported output type 'q2_k'");
  expect_clean_error({hearth, "convert", tmp + "/nope", "-o", out}, tmp + "/nope");
  expect_clean_error({hearth, "convert", golden_dir("llama2-tiny") + "/config.json", "-o", out},
                     "not a readable directory");
  // A directory without config.json.
  std::filesystem::create_directories(tmp + "/empty-model");
  expect_clean_error({hearth, "convert", tmp + "/empty-model", "-o", out},
                     tmp + "/empty-model/config.json");
  // config.json that is not JSON.
  std::filesystem::create_directories(tmp + "/bad-config");
  test::write_file(tmp + "/bad-config/config.json", "{ \"hidden_size\": ");
  expect_clean_error({hearth, "convert", tmp + "/bad-config", "-o", out}, "config.json");
  // A valid config but no weights.
  std::filesystem::create_directories(tmp + "/no-weights");
  std::filesystem::copy_file(golden_dir("llama2-tiny") + "/config.json",
                             tmp + "/no-weights/config.json");
  expect_clean_error({hearth, "convert", tmp + "/no-weights", "-o", out}, "no-weights");
  // quantize: missing input, a file that is not GGUF, an unknown type.
  expect_clean_error({hearth, "quantize", tmp + "/missing.gguf", out, "q4_0"},
                     tmp + "/missing.gguf");
  expect_clean_error({hearth, "quantize", golden_dir("llama2-tiny") + "/config.json", out, "q4_0"},
                     "config.json");
  expect_clean_error(
      {hearth, "quantize", golden_dir("llama2-tiny") + "/llama2-tiny-bf16.gguf", out, "q4_k_s"},
      "unsupported output type 'q4_k_s'");
  EXPECT_FALSE(std::filesystem::exists(out));
  // Nor its temporary (out.<pid>.partial) left behind by a failed run.
  const std::string stem = std::filesystem::path(out).filename().string() + ".";
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(out).parent_path()))
    EXPECT_NE(e.path().filename().string().rfind(stem, 0), 0u) << e.path();
}

}  // namespace
}  // namespace hearth
