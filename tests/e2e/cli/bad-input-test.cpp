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

}  // namespace
}  // namespace hearth
