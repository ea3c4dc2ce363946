// Safetensors: the goldens' files, sharded checkpoints, the writer, and headers that lie.
// A new bad-header case: one more EXPECT_HAS(error_of(header, data_bytes), "field").
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <memory>

#include "formats/safetensors.h"
#include "raw-bytes.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using test::shared_path;

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

std::vector<int64_t> i64_values(const TensorView& t) {
  std::vector<int64_t> v(size_t(t.numel()));
  std::memcpy(v.data(), t.data, t.nbytes);
  return v;
}

const char* kGoldens[] = {"llama2-tiny", "llama3-tiny", "qwen2-tiny", "kjv-13m", "llama-k256"};

TEST(Safetensors, ReadsEveryGoldenFile) {
  for (const char* model : kGoldens) {
    SCOPED_TRACE(model);
    const std::string dir = shared_path(std::string("goldens/") + model);
    auto f = SafetensorsFile::open(dir + "/golden.safetensors");
    ASSERT_TRUE(f.is_ok()) << f.message();
    const TensorView* ids = f->find_tensor("input_ids");
    const TensorView* logits = f->find_tensor("logits");
    const TensorView* prompt = f->find_tensor("gen_prompt");
    const TensorView* gen = f->find_tensor("gen_ids");
    ASSERT_TRUE(ids && logits && prompt && gen);
    EXPECT_EQ(ids->dtype, DType::I64);
    EXPECT_EQ(ids->shape, std::vector<int64_t>{16});
    EXPECT_EQ(logits->dtype, DType::F32);
    EXPECT_EQ(logits->shape, (std::vector<int64_t>{16, 32000}));
    EXPECT_EQ(logits->nbytes, 16u * 32000 * 4);
    EXPECT_EQ(prompt->dtype, DType::I64);
    EXPECT_EQ(gen->dtype, DType::I64);
    // The ids agree with golden.json, the same data written as text.
    auto golden = nlohmann::json::parse(test::read_file(dir + "/golden.json"));
    EXPECT_EQ(i64_values(*ids), golden["input_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(i64_values(*prompt), golden["gen_prompt"].get<std::vector<int64_t>>());
    EXPECT_EQ(i64_values(*gen), golden["gen_ids"].get<std::vector<int64_t>>());
    // argmax of each logits row matches too: checks the F32 view's offset and layout.
    const auto argmax = golden["argmax"].get<std::vector<int64_t>>();
    ASSERT_EQ(argmax.size(), 16u);
    for (int64_t r = 0; r < 16; ++r) {
      const float* row = reinterpret_cast<const float*>(logits->row(r));
      int64_t best = 0;
      for (int64_t c = 1; c < 32000; ++c)
        if (row[c] > row[best]) best = c;
      EXPECT_EQ(best, argmax[size_t(r)]) << "row " << r;
    }
  }
}

TEST(Safetensors, OpensEveryGoldenCheckpoint) {
  struct Expect {
    const char* model;
    int64_t hidden, layers;
    bool tied, qkv_bias;
  };
  const Expect expects[] = {{"llama2-tiny", 96, 2, false, false},
                            {"llama3-tiny", 128, 2, true, false},
                            {"qwen2-tiny", 128, 2, true, true},
                            {"kjv-13m", 256, 6, true, false},
                            {"llama-k256", 256, 2, true, false}};
  for (const Expect& e : expects) {
    SCOPED_TRACE(e.model);
    auto ck = SafetensorsCheckpoint::open_dir(shared_path(std::string("goldens/") + e.model));
    ASSERT_TRUE(ck.is_ok()) << ck.message();
    const size_t want = size_t(e.layers) * (9 + (e.qkv_bias ? 3 : 0)) + 2 + (e.tied ? 0 : 1);
    EXPECT_EQ(ck->tensors().size(), want);
    const TensorView* embd = ck->find_tensor("model.embed_tokens.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->dtype, DType::BF16);
    EXPECT_EQ(embd->shape, (std::vector<int64_t>{32000, e.hidden}));
    EXPECT_EQ(ck->find_tensor("lm_head.weight") != nullptr, !e.tied);
    EXPECT_EQ(ck->find_tensor("model.layers.0.self_attn.q_proj.bias") != nullptr, e.qkv_bias);
    EXPECT_NE(ck->find_tensor("model.layers." + std::to_string(e.layers - 1) +
                              ".post_attention_layernorm.weight"),
              nullptr);
  }
  auto f = SafetensorsFile::open(shared_path("goldens/llama2-tiny/model.safetensors"));
  ASSERT_TRUE(f.is_ok());
  ASSERT_EQ(f->metadata().count("format"), 1u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

OwnedTensor owned(const std::string& name, DType dt, std::vector<int64_t> shape, size_t nbytes,
                  uint8_t fill) {
  return OwnedTensor{name, dt, std::move(shape), std::vector<uint8_t>(nbytes, fill)};
}

TEST(Safetensors, WriterRoundTrip) {
  const std::string path = test::temp_dir() + "/rt.safetensors";
  std::vector<OwnedTensor> ts = {
      owned("logits", DType::F32, {2, 3}, 24, 1), owned("h", DType::F16, {5}, 10, 2),
      owned("b", DType::BF16, {1, 1, 3}, 6, 3),   owned("ids", DType::I64, {4}, 32, 4),
      owned("i", DType::I32, {}, 4, 5),           owned("empty", DType::F32, {0, 7}, 0, 0),
  };
  ASSERT_TRUE(write_safetensors(path, ts).is_ok());
  const std::string raw = test::read_file(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, raw.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);  // data section 8-byte aligned
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  ASSERT_EQ(f->tensors().size(), ts.size());
  for (const OwnedTensor& t : ts) {
    SCOPED_TRACE(t.name);
    const TensorView* v = f->find_tensor(t.name);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->dtype, t.dtype);
    EXPECT_EQ(v->shape, t.shape);
    ASSERT_EQ(v->nbytes, t.bytes.size());
    if (v->nbytes) {
      EXPECT_EQ(std::memcmp(v->data, t.bytes.data(), v->nbytes), 0);
    }
  }
  // Byte size mismatch and duplicate names are refused.
  auto bad = write_safetensors(path, {owned("x", DType::F32, {3}, 8, 0)});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_HAS(bad.message(), "tensor 'x'");
  EXPECT_FALSE(write_safetensors(
                   path, {owned("x", DType::F32, {1}, 4, 0), owned("x", DType::F32, {1}, 4, 0)})
                   .is_ok());
  EXPECT_FALSE(write_safetensors(path, {owned("q", DType::Q4_0, {32}, 18, 0)}).is_ok());
}

TEST(Safetensors, ShardedCheckpoint) {
  const std::string dir = test::temp_dir() + "/sharded";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  ASSERT_TRUE(
      write_safetensors(dir + "/model-00001-of-00002.safetensors",
                        {owned("a", DType::F32, {2}, 8, 1), owned("b", DType::F32, {1}, 4, 2)})
          .is_ok());
  ASSERT_TRUE(write_safetensors(dir + "/model-00002-of-00002.safetensors",
                                {owned("c", DType::BF16, {3}, 6, 3)})
                  .is_ok());
  auto index = [&](const std::string& weight_map) {
    test::write_file(dir + "/model.safetensors.index.json",
                     R"({"metadata": {"total_size": 18}, "weight_map": )" + weight_map + "}");
  };
  index(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors"})");
  auto ck = SafetensorsCheckpoint::open_dir(dir);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  ASSERT_EQ(ck->tensors().size(), 3u);
  ASSERT_NE(ck->find_tensor("c"), nullptr);
  EXPECT_EQ(ck->find_tensor("c")->dtype, DType::BF16);
  EXPECT_EQ(static_cast<const uint8_t*>(ck->find_tensor("c")->data)[0], 3);
  EXPECT_EQ(ck->find_tensor("nope"), nullptr);

  index(R"({"a": "model-00001-of-00002.safetensors", "d": "model-00003-of-00003.safetensors"})");
  auto missing = SafetensorsCheckpoint::open_dir(dir);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_HAS(missing.message(),
             "model.safetensors.index.json: weight_map: tensor 'd': shard "
             "'model-00003-of-00003.safetensors' not found");

  index(R"({"c": "model-00001-of-00002.safetensors"})");
  auto wrong_shard = SafetensorsCheckpoint::open_dir(dir);
  ASSERT_FALSE(wrong_shard.is_ok());
  EXPECT_HAS(wrong_shard.message(), "tensor 'c': not found in shard");

  index(R"({"a": "../outside.safetensors"})");
  EXPECT_HAS(SafetensorsCheckpoint::open_dir(dir).message(), "is not a file name in the folder");

  test::write_file(dir + "/model.safetensors.index.json", R"({"weight_map": {"a": )");
  EXPECT_HAS(SafetensorsCheckpoint::open_dir(dir).message(),
             "model.safetensors.index.json: malformed JSON");
  test::write_file(dir + "/model.safetensors.index.json", R"({"weight_map": 3})");
  EXPECT_HAS(SafetensorsCheckpoint::open_dir(dir).message(),
             "weight_map: missing or not an object");

  auto empty = SafetensorsCheckpoint::open_dir(test::temp_dir() + "/no-such-dir");
  ASSERT_FALSE(empty.is_ok());
  EXPECT_HAS(empty.message(), "no model.safetensors or model.safetensors.index.json");
}

// --- Headers that lie -------------------------------------------------------------------------

Result<SafetensorsFile> parse_copy(const std::vector<uint8_t>& bytes, size_t n) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[n ? n : 1]);
  if (n) std::memcpy(copy.get(), bytes.data(), n);
  return SafetensorsFile::parse(copy.get(), n, "bad.safetensors");  // views die with `copy`
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  auto r = parse_copy(bytes, bytes.size());
  EXPECT_FALSE(r.is_ok()) << "parsed successfully";
  if (r.is_ok()) return "";
  EXPECT_EQ(r.message().rfind("bad.safetensors: ", 0), 0u) << r.message();
  EXPECT_EQ(r.message().find('\n'), std::string::npos) << r.message();
  return r.message();
}
std::string error_of(const std::string& header, size_t data_bytes) {
  return error_of(test::safetensors_bytes(header, data_bytes));
}

TEST(SafetensorsBadInput, HeaderLength) {
  EXPECT_HAS(error_of(std::vector<uint8_t>{1, 2, 3}), "too short for safetensors");
  test::RawBytes past;
  past.u64(1000).bytes("{}");
  EXPECT_HAS(error_of(past.b), "header length 1000 extends past end of file (size 10)");
  test::RawBytes huge;
  huge.u64(~0ull).bytes("{}");
  EXPECT_HAS(error_of(huge.b), "header length 18446744073709551615 extends past end of file");
  EXPECT_HAS(error_of("{", 0), "too short for JSON");
}

TEST(SafetensorsBadInput, MalformedJson) {
  EXPECT_HAS(error_of(R"({"a": {"dtype": "F32",)", 0), "header: malformed JSON");
  EXPECT_HAS(error_of(R"([1, 2])", 0), "header: JSON is not an object");
  EXPECT_HAS(error_of("{\"a\":\n\n[", 0), "malformed JSON");
}

TEST(SafetensorsBadInput, OffsetsOutsideData) {
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
             "tensor 'w': data_offsets [0, 16] extend past end of data (8 bytes)");
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F32", "shape": [1],
                          "data_offsets": [18446744073709551612, 18446744073709551615]}})",
                      8),
             "tensor 'w': data_offsets");
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8),
             "tensor 'w': data_offsets [8, 4]: end before begin");
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 8),
             "tensor 'w': data_offsets: expected [begin, end]");
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 8),
             "tensor 'w': data_offsets: expected [begin, end]");
}

TEST(SafetensorsBadInput, SizeMismatch) {
  EXPECT_HAS(error_of(R"({"logits": {"dtype": "F32", "shape": [16, 32000],
                               "data_offsets": [0, 64]}})",
                      64),
             "tensor 'logits': data_offsets [0, 64] hold 64 bytes, but F32 [16, 32000] needs "
             "2048000");
  EXPECT_HAS(error_of(R"({"w": {"dtype": "BF16", "shape": [4294967296, 4294967296, 16],
                          "data_offsets": [0, 8]}})",
                      8),
             "tensor 'w': shape: element count overflows 64 bits");
  EXPECT_HAS(error_of(R"({"w": {"dtype": "I64", "shape": [1152921504606846976, 2],
                          "data_offsets": [0, 8]}})",
                      8),
             "needs more than 2^64");
}

TEST(SafetensorsBadInput, Overlap) {
  EXPECT_HAS(error_of(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                      16),
             "tensor 'b': data_offsets [8, 16] overlap tensor 'a' [0, 16]");
  // Touching is fine, and empty tensors overlap nothing.
  const auto touching = test::safetensors_bytes(
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
          "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
      16);
  auto ok = parse_copy(touching, touching.size());
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_EQ(ok->tensors().size(), 3u);
}

TEST(SafetensorsBadInput, BadDtypeAndShape) {
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", 8),
             "tensor 'w': dtype: unsupported dtype 'F8_E4M3'");
  EXPECT_HAS(error_of(R"({"w": {"dtype": 7, "shape": [1], "data_offsets": [0, 1]}})", 8),
             "tensor 'w': dtype: missing or not a string");
  EXPECT_HAS(error_of(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 8), "tensor 'w': dtype");
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 8),
             "tensor 'w': shape: dimension -1 is not a non-negative integer");
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 4]}})", 8),
             "tensor 'w': shape: missing or not an array");
  EXPECT_HAS(error_of(R"({"w": [1, 2]})", 8), "tensor 'w': expected an object");
}

TEST(SafetensorsBadInput, DuplicateNamesAndMetadata) {
  EXPECT_HAS(error_of(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                          "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                      8),
             "header: duplicate tensor 'w'");
  EXPECT_HAS(error_of(R"({"__metadata__": {"format": 1}})", 0),
             "__metadata__: value of 'format' is not a string");
  EXPECT_HAS(error_of(R"({"__metadata__": [1]})", 0), "__metadata__: expected an object");
}

TEST(SafetensorsBadInput, ValidSmallFileAndEveryCutPoint) {
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}, "b": {"dtype": "I32", "shape": [2], "data_offsets": [8, 16]}})";
  const auto bytes = test::safetensors_bytes(header, 16);
  std::vector<uint8_t> copy = bytes;
  auto ok = SafetensorsFile::parse(copy.data(), copy.size(), "ok.safetensors");
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_EQ(ok->tensors().size(), 2u);
  EXPECT_EQ(ok->metadata().at("format"), "pt");
  EXPECT_EQ(ok->find_tensor("a")->shape, (std::vector<int64_t>{2, 2}));
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = parse_copy(bytes, cut);
    ASSERT_FALSE(r.is_ok()) << "cut at " << cut;
    EXPECT_EQ(r.message().find('\n'), std::string::npos) << r.message();
  }
}

}  // namespace
}  // namespace hearth
