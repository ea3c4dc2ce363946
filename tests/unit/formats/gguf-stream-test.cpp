// GgufWriter's streaming mode (declare_tensor + open_stream), which convert and quantize use:
// the same bytes as write(), sizes and order enforced, nothing left behind when a stream fails.
#include <gtest/gtest.h>

#include <filesystem>

#include "formats/gguf.h"
#include "support/test-data.h"

namespace hearth {
namespace {

struct Sample {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<Sample> samples() {
  std::vector<Sample> s = {{"a", DType::F32, {3, 5}, std::vector<uint8_t>(60)},
                           {"b.q8", DType::Q8_0, {2, 32}, std::vector<uint8_t>(68)},
                           {"c", DType::BF16, {1, 1, 7}, std::vector<uint8_t>(14)}};
  for (auto& t : s)
    for (size_t i = 0; i < t.bytes.size(); ++i) t.bytes[i] = uint8_t(i * 7 + t.name.size());
  return s;
}

GgufWriter with_metadata(uint32_t alignment) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  if (alignment) w.set_u32("general.alignment", alignment);
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "a"});
  return w;
}

// Files in `path`'s folder whose names start with its name: the file and any temporary.
std::vector<std::string> files_named_like(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string stem = p.filename().string();
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path()))
    if (e.path().filename().string().rfind(stem, 0) == 0) out.push_back(e.path().string());
  return out;
}

TEST(GgufStream, WritesTheSameBytesAsWrite) {
  for (uint32_t alignment : {0u, 1u, 64u}) {
    SCOPED_TRACE(alignment);
    GgufWriter held = with_metadata(alignment), streamed = with_metadata(alignment);
    for (const auto& t : samples()) {
      held.add_tensor(t.name, t.dtype, t.shape, t.bytes);
      streamed.declare_tensor(t.name, t.dtype, t.shape);
    }
    const std::string path = test::temp_dir() + "/stream-" + std::to_string(alignment) + ".gguf";
    auto stream = streamed.open_stream(path);
    ASSERT_TRUE(stream.is_ok()) << stream.message();
    ASSERT_EQ(stream->tensors().size(), 3u);
    EXPECT_EQ(stream->tensors()[1].name, "b.q8");
    EXPECT_EQ(stream->tensors()[1].nbytes, 68u);  // from dtype and shape
    for (const auto& t : samples()) {
      EXPECT_FALSE(std::filesystem::exists(path));  // appears only when complete
      ASSERT_TRUE(stream->write_tensor(t.bytes.data(), t.bytes.size()).is_ok());
    }
    ASSERT_TRUE(stream->finish().is_ok());
    const std::string on_disk = test::read_file(path);
    EXPECT_EQ(std::vector<uint8_t>(on_disk.begin(), on_disk.end()), held.to_bytes());
    EXPECT_EQ(files_named_like(path), std::vector<std::string>{path});  // no temporary left
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    EXPECT_EQ(f->tensors().size(), 3u);
  }
}

// quantize copies a source file's metadata as is: any integer alignment the reader takes.
TEST(GgufStream, KeepsAnIntegerAlignmentOfAnyWidth) {
  GgufWriter w;
  w.set_u64("general.alignment", 64);
  w.declare_tensor("a", DType::F32, {3});
  const std::string path = test::temp_dir() + "/stream-u64-align.gguf";
  auto stream = w.open_stream(path);
  ASSERT_TRUE(stream.is_ok()) << stream.message();
  const float a[3] = {1, 2, 3};
  ASSERT_TRUE(stream->write_tensor(a, sizeof a).is_ok());
  ASSERT_TRUE(stream->finish().is_ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);

  GgufWriter bad;
  bad.set_f32("general.alignment", 64);
  EXPECT_NE(bad.validate().message().find("general.alignment"), std::string::npos);
}

TEST(GgufStream, EnforcesSizesAndCount) {
  GgufWriter w = with_metadata(0);
  for (const auto& t : samples()) w.declare_tensor(t.name, t.dtype, t.shape);
  const std::string path = test::temp_dir() + "/stream-bad.gguf";
  {
    auto stream = w.open_stream(path);
    ASSERT_TRUE(stream.is_ok()) << stream.message();
    const auto s = samples();
    auto wrong = stream->write_tensor(s[0].bytes.data(), 59);
    ASSERT_FALSE(wrong.is_ok());
    EXPECT_NE(wrong.message().find("tensor 'a': 59 bytes, expected 60"), std::string::npos)
        << wrong.message();
    ASSERT_TRUE(stream->write_tensor(s[0].bytes.data(), 60).is_ok());
    auto early = stream->finish();
    ASSERT_FALSE(early.is_ok());
    EXPECT_NE(early.message().find("only 1 of 3 tensors written"), std::string::npos)
        << early.message();
  }
  // The abandoned stream left neither the file nor its temporary.
  EXPECT_TRUE(files_named_like(path).empty());

  auto stream = w.open_stream(path);
  ASSERT_TRUE(stream.is_ok()) << stream.message();
  for (const auto& t : samples())
    ASSERT_TRUE(stream->write_tensor(t.bytes.data(), t.bytes.size()).is_ok());
  const uint8_t extra[4] = {};
  EXPECT_FALSE(stream->write_tensor(extra, sizeof extra).is_ok());
  EXPECT_TRUE(stream->finish().is_ok());
}

TEST(GgufStream, RefusesMixedOrInvalidTensors) {
  const std::string dir = test::temp_dir();
  GgufWriter held = with_metadata(0);
  held.add_tensor("x", DType::F32, {2}, std::vector<uint8_t>(8));
  auto s1 = held.open_stream(dir + "/mixed.gguf");
  ASSERT_FALSE(s1.is_ok());
  EXPECT_NE(s1.message().find("tensor 'x'"), std::string::npos) << s1.message();

  GgufWriter declared = with_metadata(0);
  declared.declare_tensor("y", DType::F32, {2});
  auto s2 = declared.write(dir + "/declared.gguf");
  ASSERT_FALSE(s2.is_ok());
  EXPECT_NE(s2.message().find("open_stream"), std::string::npos) << s2.message();
  // to_bytes() (tests, seeds) stands zeros in for declared bytes.
  const std::vector<uint8_t> bytes = declared.to_bytes();
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(std::vector<uint8_t>(bytes.end() - 32, bytes.end()), std::vector<uint8_t>(32, 0));

  GgufWriter bad = with_metadata(0);
  bad.declare_tensor("q", DType::Q4_0, {1, 33});
  auto s3 = bad.open_stream(dir + "/bad-shape.gguf");
  ASSERT_FALSE(s3.is_ok());
  EXPECT_NE(s3.message().find("block size"), std::string::npos) << s3.message();
  EXPECT_TRUE(files_named_like(dir + "/bad-shape.gguf").empty());
}

}  // namespace
}  // namespace hearth
