// The `hearth` command-line contract as scripts use it: run (text, --tokens, --json), logits,
// tokenize, info — on the golden models, checked against the HF reference outputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "support/golden-data.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using test::run_command;
using test::shared_path;

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

TEST(CliRun, JsonGreedyReproducesGoldenFromTokens) {
  test::Golden g = test::load_golden(shared_path("goldens/llama2-tiny"));
  auto r = run_command({test::hearth_cli(), "run", "-m",
                        shared_path("goldens/llama2-tiny/llama2-tiny-bf16.gguf"), "--tokens",
                        join_ids(g.gen_prompt), "-n", std::to_string(g.gen_ids.size()), "--temp",
                        "0", "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"].get<std::vector<int32_t>>(), g.gen_prompt);
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), g.gen_ids);
  EXPECT_TRUE(j["text"].is_string());
  for (const char* k : {"load_ms", "prompt_tok_s", "gen_tok_s"})
    EXPECT_TRUE(j["timings"][k].is_number()) << k;
}

TEST(CliRun, StreamsReadableTextAndReportsTimings) {
  auto r = run_command({test::hearth_cli(), "run", "-m", shared_path("goldens/kjv-13m"), "-p",
                        "And the king said", "-n", "24", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The README's demo: the trained model continues in King James English.
  EXPECT_NE(r.out.find("And the king said unto me"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos);
  EXPECT_NE(r.err.find("ms/token"), std::string::npos);
}

TEST(CliRun, SameSeedSameOutput) {
  auto once = [] {
    return run_command({test::hearth_cli(), "run", "-m",
                        shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"), "-p", "In the beginning",
                        "-n", "20", "--temp", "0.9", "--seed", "42", "--json"});
  };
  auto a = once(), b = once();
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["tokens"], nlohmann::json::parse(b.out)["tokens"]);
}

TEST(CliLogits, WritesSafetensorsMatchingGolden) {
  test::Golden g = test::load_golden(shared_path("goldens/qwen2-tiny"));
  const std::string out = test::temp_dir() + "/qwen2-logits.safetensors";
  // An f32 KV cache: the 1e-4 bound is the goldens' f32 math (the default f16 cache has its own
  // bounds, tests/golden/kv-types-golden-test.cpp).
  auto r =
      run_command({test::hearth_cli(), "logits", "-m", shared_path("goldens/qwen2-tiny"),
                   "--tokens", join_ids(g.input_ids), "-o", out, "-ctk", "f32", "-ctv", "f32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = SafetensorsFile::open(out);
  ASSERT_TRUE(f.is_ok()) << f.message();
  const TensorView* t = f->find_tensor("logits");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F32);
  ASSERT_EQ(t->shape, (std::vector<int64_t>{int64_t(g.input_ids.size()), g.n_vocab}));
  std::vector<float> got(static_cast<const float*>(t->data),
                         static_cast<const float*>(t->data) + t->numel());
  EXPECT_LE(test::max_row_relative_error(got, g.logits, g.n_vocab), 1e-4);
}

TEST(CliTokenize, JsonFileAndNoBos) {
  const std::string model = shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf");
  auto r = run_command(
      {test::hearth_cli(), "tokenize", "-m", model, "-p", "And the king said", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(),
            (std::vector<int32_t>{1, 1126, 278, 6989, 1497}));  // golden gen_prompt of kjv-13m
  auto nb = run_command({test::hearth_cli(), "tokenize", "-m", model, "-p", "And the king said",
                         "--json", "--no-bos"});
  EXPECT_EQ(nlohmann::json::parse(nb.out).get<std::vector<int32_t>>(),
            (std::vector<int32_t>{1126, 278, 6989, 1497}));
  // --file tokenizes the exact bytes, trailing newline included.
  const std::string path = test::temp_dir() + "/prompt.txt";
  test::write_file(path, "And the king said\n");
  auto f = run_command({test::hearth_cli(), "tokenize", "-m", model, "--file", path, "--json"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  auto ids = nlohmann::json::parse(f.out).get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(ids.back(), 13);  // <0x0A>
}

TEST(CliInfo, DescribesModel) {
  auto r = run_command({test::hearth_cli(), "info", "-m",
                        shared_path("goldens/llama3-tiny/llama3-tiny-bf16.gguf"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["n_layer"], 2);
  EXPECT_EQ(j["n_head"], 4);
  EXPECT_EQ(j["n_head_kv"], 2);
  EXPECT_EQ(j["n_vocab"], 32000);
  EXPECT_EQ(j["rope_scaling"], "freqs");
  EXPECT_TRUE(j["tensor_types"].contains("BF16"));
  EXPECT_EQ(j["tokenizer"]["n_vocab"], 32000);
  auto text = run_command({test::hearth_cli(), "info", "-m", shared_path("goldens/qwen2-tiny")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("qwen2"), std::string::npos);
}

// --version names the CPU's features and the kernel table the process runs (for bug reports),
// which HEARTH_ISA changes.
TEST(CliVersion, NamesTheKernelTable) {
  auto r = run_command({test::hearth_cli(), "--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("hearth ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\ncpu: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; kernels: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ncuda: "), std::string::npos) << r.out;
  auto ref = run_command({"/usr/bin/env", "HEARTH_ISA=ref", test::hearth_cli(), "--version"});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_NE(ref.out.find("; kernels: ref\n"), std::string::npos) << ref.out;
}

TEST(CliRun, GpuLayersWithoutGpuFallsBackToCpu) {
  auto r = run_command({test::hearth_cli(), "run", "-m",
                        shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"), "-p", "And", "-n", "4",
                        "--temp", "0", "--gpu-layers", "99"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--gpu-layers ignored"), std::string::npos) << r.err;
  // 'auto' too (one line, then the CPU); a value that is none of N / all / auto is refused.
  for (const char* v : {"auto", "all"}) {
    auto a = run_command({test::hearth_cli(), "run", "-m",
                          shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"), "-p", "And", "-n", "2",
                          "--temp", "0", "--gpu-layers", v});
    ASSERT_EQ(a.exit_code, 0) << v << ": " << a.err;
    EXPECT_NE(a.err.find("--gpu-layers ignored"), std::string::npos) << a.err;
  }
  auto bad = run_command({test::hearth_cli(), "run", "-m",
                          shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf"), "-p", "And",
                          "--gpu-layers", "most"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--gpu-layers: 'most'"), std::string::npos) << bad.err;
}

// The CUDA backend's options are flags of every model-running command; a CPU-only run takes
// them (they only change what a GPU does) and the same greedy tokens come out; a chain depth
// outside 0..8 is refused with a line naming the flag.
TEST(CliRun, CudaOptionFlagsAreAcceptedAndChecked) {
  const std::string model = shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf");
  auto plain = run_command(
      {test::hearth_cli(), "run", "-m", model, "-p", "And", "-n", "4", "--temp", "0", "--json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto flagged =
      run_command({test::hearth_cli(), "run", "-m", model, "-p", "And", "-n", "4", "--temp", "0",
                   "--json", "--no-cuda-graphs", "--cuda-chain-depth", "0", "--cuda-profile"});
  ASSERT_EQ(flagged.exit_code, 0) << flagged.err;
  EXPECT_EQ(nlohmann::json::parse(flagged.out)["tokens"],
            nlohmann::json::parse(plain.out)["tokens"]);
  auto bad =
      run_command({test::hearth_cli(), "run", "-m", model, "-p", "And", "--cuda-chain-depth", "9"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--cuda-chain-depth"), std::string::npos) << bad.err;
}

// The CPU backend's options are flags of every model-running command. The prompt sits below the
// AMX threshold, so turning the engine off and verifying every cached byte cannot change the
// greedy tokens; a forced threshold of 1 must still run. Bad values are refused naming the flag.
TEST(CliRun, CpuOptionFlagsAreAcceptedAndChecked) {
  const std::string model = shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf");
  const std::vector<std::string> base = {
      test::hearth_cli(), "run", "-m", model, "-p", "And", "-n", "4", "--temp", "0", "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv);
  };
  auto plain = with({});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto flagged = with({"--no-amx", "--cache-verify", "full", "--decode-lanes", "on"});
  ASSERT_EQ(flagged.exit_code, 0) << flagged.err;
  EXPECT_EQ(nlohmann::json::parse(flagged.out)["tokens"],
            nlohmann::json::parse(plain.out)["tokens"]);
  auto forced = with({"--amx-min-tokens", "1", "--cache-verify", "sample"});
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  const size_t n_forced = nlohmann::json::parse(forced.out)["tokens"].size();
  EXPECT_TRUE(n_forced >= 1 && n_forced <= 4) << forced.out;
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--cache-verify", "never"},
                                    {"--amx-min-tokens", "-1"},
                                    {"--decode-lanes", "sometimes"}}) {
    auto bad = with({flag, value});
    EXPECT_NE(bad.exit_code, 0) << flag << " " << value;
    EXPECT_NE(bad.err.find(flag), std::string::npos) << bad.err;
  }
}

}  // namespace
}  // namespace hearth
