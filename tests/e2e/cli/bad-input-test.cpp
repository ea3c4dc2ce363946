// Bad model files through the real CLI: each gives ONE error line naming the file (and the field
// or tensor), exit code 1, and never a crash (a signal would show as exit code >= 128).
#include <gtest/gtest.h>

#include <cstring>

#include "formats/gguf.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using test::run_command;

// Runs `hearth info -m path` and checks the one-line error contract.
void expect_clean_error(const std::string& path, const std::string& must_mention) {
  auto r = run_command({test::hearth_cli(), "info", "-m", path});
  EXPECT_EQ(r.exit_code, 1) << "stderr: " << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
  EXPECT_EQ(r.err.rfind("hearth: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << "does not name the file: " << r.err;
  EXPECT_NE(r.err.find(must_mention), std::string::npos)
      << "expected '" << must_mention << "' in: " << r.err;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = test::temp_dir() + "/" + name;
  test::write_file(path, bytes);
  return path;
}

std::string real_gguf() {
  std::string b = test::read_file(test::shared_path("goldens/llama2-tiny/llama2-tiny-q8_0.gguf"));
  EXPECT_GT(b.size(), 1000u);
  return b;
}

TEST(BadInput, TruncatedGgufAtManyPoints) {
  const std::string good = real_gguf();
  for (size_t cut : {size_t(0), size_t(3), size_t(7), size_t(20), size_t(100), size_t(1000),
                     size_t(50000), good.size() / 2, good.size() - 1}) {
    SCOPED_TRACE(cut);
    const std::string path =
        write_temp("cut-" + std::to_string(cut) + ".gguf", good.substr(0, cut));
    auto r = run_command({test::hearth_cli(), "info", "-m", path});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  }
}

TEST(BadInput, WrongMagic) {
  std::string b = real_gguf();
  std::memcpy(b.data(), "GGML", 4);
  expect_clean_error(write_temp("magic.gguf", b), "magic");
}

TEST(BadInput, VersionOne) {
  std::string b = real_gguf();
  const uint32_t v = 1;
  std::memcpy(b.data() + 4, &v, 4);
  expect_clean_error(write_temp("v1.gguf", b), "version");
}

TEST(BadInput, AbsurdTensorAndKvCounts) {
  std::string b = real_gguf();
  const uint64_t huge = uint64_t(1) << 62;
  std::string t = b;
  std::memcpy(t.data() + 8, &huge, 8);
  expect_clean_error(write_temp("tensors.gguf", t), "tensor");
  std::string k = b;
  std::memcpy(k.data() + 16, &huge, 8);
  expect_clean_error(write_temp("kvs.gguf", k), "k");
}

TEST(BadInput, UnknownArchitecture) {
  GgufWriter w;
  w.set_string("general.architecture", "gpt-j-9000");
  w.add_tensor("token_embd.weight", DType::F32, {4, 8}, std::vector<uint8_t>(4 * 8 * 4));
  const std::string path = test::temp_dir() + "/arch.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  expect_clean_error(path, "unknown architecture 'gpt-j-9000'");
}

GgufWriter tiny_llama_header() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 256);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.feed_forward_length", 256);
  w.set_u32("llama.attention.head_count", 2);
  w.set_u32("llama.context_length", 64);
  return w;
}

TEST(BadInput, MissingTensor) {
  GgufWriter w = tiny_llama_header();
  w.add_tensor("token_embd.weight", DType::F32, {8, 256}, std::vector<uint8_t>(8 * 256 * 4));
  w.add_tensor("output_norm.weight", DType::F32, {256}, std::vector<uint8_t>(256 * 4));
  const std::string path = test::temp_dir() + "/missing.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  expect_clean_error(path, "missing tensor blk.0.attn_norm.weight");
}

TEST(BadInput, UnsupportedTensorType) {
  GgufWriter w = tiny_llama_header();
  w.add_tensor("token_embd.weight", DType::F32, {8, 256}, std::vector<uint8_t>(8 * 256 * 4));
  w.add_tensor("output_norm.weight", DType::F32, {256}, std::vector<uint8_t>(256 * 4));
  w.add_tensor("blk.0.attn_norm.weight", DType::F32, {256}, std::vector<uint8_t>(256 * 4));
  // Q2_K: 84 bytes per 256 weights; known to the format, not runnable by Hearth.
  w.add_tensor("blk.0.attn_q.weight", DType::Q2_K, {256, 256}, std::vector<uint8_t>(256 * 84));
  const std::string path = test::temp_dir() + "/q2k.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  expect_clean_error(path, "unsupported tensor type Q2_K (blk.0.attn_q.weight)");
}

TEST(BadInput, WrongTensorShape) {
  GgufWriter w = tiny_llama_header();
  w.add_tensor("token_embd.weight", DType::F32, {8, 256}, std::vector<uint8_t>(8 * 256 * 4));
  w.add_tensor("output_norm.weight", DType::F32, {128}, std::vector<uint8_t>(128 * 4));
  const std::string path = test::temp_dir() + "/shape.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  expect_clean_error(path, "output_norm.weight has shape [128], expected [256]");
}

// The tiny header with `edit` applied and one embedding tensor, written as `name`: its path.
template <class Edit>
std::string header_edited(const std::string& name, Edit&& edit) {
  GgufWriter w = tiny_llama_header();
  edit(w);
  w.add_tensor("token_embd.weight", DType::F32, {8, 256}, std::vector<uint8_t>(8 * 256 * 4));
  const std::string path = test::temp_dir() + "/" + name;
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

// Per-layer and RoPE tables are sized by these keys: counts the file cannot back are refused
// before that (2^31 layers asked for 32 GB, heads 2^40 wide for 2 TB).
TEST(BadInput, LayerCountPastTheFile) {
  expect_clean_error(
      header_edited("layers.gguf", [](GgufWriter& w) { w.set_u32("llama.block_count", 1u << 31); }),
      "key llama.block_count 2147483648 exceeds what the file holds");
}

TEST(BadInput, HeadWiderThanAnyModel) {
  expect_clean_error(header_edited("head.gguf",
                                   [](GgufWriter& w) {
                                     w.set_u64("llama.attention.key_length", uint64_t(1) << 40);
                                     w.set_u64("llama.rope.dimension_count", uint64_t(1) << 40);
                                   }),
                     "head dimension 1099511627776 (llama.attention.key_length) is not in");
}

TEST(BadInput, ContextLengthNotPositive) {
  expect_clean_error(
      header_edited("ctx.gguf", [](GgufWriter& w) { w.set_i32("llama.context_length", -1); }),
      "key llama.context_length has invalid value -1");
}

// The GGUF getters name the file themselves; the loader's context must not name it again.
TEST(BadInput, KeyOfTheWrongTypeNamesTheFileOnce) {
  const std::string path = header_edited(
      "key-type.gguf", [](GgufWriter& w) { w.set_string("llama.context_length", "4096"); });
  expect_clean_error(path, "metadata key 'llama.context_length' has type STRING");
  const auto r = run_command({test::hearth_cli(), "info", "-m", path});
  EXPECT_EQ(r.err.find(path), r.err.rfind(path)) << "names the file twice: " << r.err;
}

TEST(BadInput, MalformedConfigJson) {
  const std::string dir = test::temp_dir() + "/badconfig";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  test::write_file(dir + "/config.json", "{\"model_type\": \"llama\", \"hidden_size\": ");
  expect_clean_error(dir, "config.json");
}

TEST(BadInput, ConfigFieldOfWrongType) {
  const std::string dir = test::temp_dir() + "/badfield";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  std::string cfg = test::read_file(test::shared_path("goldens/llama2-tiny/config.json"));
  const size_t at = cfg.find("\"hidden_size\": 96");
  ASSERT_NE(at, std::string::npos);
  cfg.replace(at, 17, "\"hidden_size\": \"ninety-six\"");
  test::write_file(dir + "/config.json", cfg);
  expect_clean_error(dir, "hidden_size");
}

TEST(BadInput, SafetensorsHeaderLies) {
  const std::string dir = test::temp_dir() + "/badst";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  test::write_file(dir + "/config.json",
                   test::read_file(test::shared_path("goldens/llama2-tiny/config.json")));
  // Header claims 1 MiB of JSON in a 40-byte file.
  std::string st(8, '\0');
  const uint64_t len = 1 << 20;
  std::memcpy(st.data(), &len, 8);
  st += "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  test::write_file(dir + "/model.safetensors", st);
  expect_clean_error(dir, "model.safetensors");
}

TEST(BadInput, NonexistentPath) {
  auto r = run_command({test::hearth_cli(), "run", "-m", "/nonexistent/model.gguf", "-p", "hi"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
}

// The KV cache flags: an unknown type, a list outside bench, q8_0 on a head size that is not
// whole blocks (phi3-tiny's 16) each give one line naming the flag or the field; llama.cpp's
// -ctk / -ctv spellings and every type run. And bench's depth beyond the model's context.
// (Progress lines such as the load notice may come first: the error is the last line, the only
// one that says error.)
void expect_one_line(const test::CommandResult& r, const std::string& must_mention) {
  EXPECT_EQ(r.exit_code, 1) << "stderr: " << r.err;
  ASSERT_FALSE(r.err.empty());
  ASSERT_EQ(r.err.back(), '\n') << r.err;
  const size_t start = r.err.rfind('\n', r.err.size() - 2);
  const std::string last = r.err.substr(start == std::string::npos ? 0 : start + 1);
  EXPECT_EQ(last.rfind("hearth: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("error"), r.err.size() - last.size() + 8) << "another error line: " << r.err;
  EXPECT_NE(last.find(must_mention), std::string::npos)
      << "expected '" << must_mention << "' in: " << r.err;
}

TEST(BadInput, KvCacheTypes) {
  const std::string kjv = test::shared_path("goldens/kjv-13m/kjv-13m-q8_0.gguf");
  const std::string cli = test::hearth_cli();
  expect_one_line(run_command({cli, "run", "-m", kjv, "-p", "And", "-n", "2", "-ctk", "q4_0"}),
                  "--cache-type-k: 'q4_0' is not one of f32|f16|bf16|q8_0");
  expect_one_line(
      run_command({cli, "run", "-m", kjv, "-p", "And", "-n", "2", "--cache-type-v", "f16,q8_0"}),
      "--cache-type-v: give one type (lists are for bench)");
  expect_one_line(run_command({cli, "run", "-m", test::shared_path("goldens/phi3-tiny"), "-p",
                               "And", "-n", "2", "-ctv", "q8_0"}),
                  "V type q8_0 needs a head_dim that is a multiple of 32; this model's is 16");
  expect_one_line(run_command({cli, "bench", "-m", kjv, "-p", "16", "-n", "8", "-r", "1", "--depth",
                               "1024", "-ctk", "f16,q8_0"}),
                  "--depth 1024 plus the longest test (16 tokens) exceeds the model's context "
                  "of 1024 tokens");
  for (const char* t : {"f32", "f16", "bf16", "q8_0"}) {
    auto r = run_command({cli, "run", "-m", kjv, "-p", "And the king said", "-n", "4", "--temp",
                          "0", "-ctk", t, "-ctv", t});
    EXPECT_EQ(r.exit_code, 0) << t << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << t;
  }
}

}  // namespace
}  // namespace hearth
