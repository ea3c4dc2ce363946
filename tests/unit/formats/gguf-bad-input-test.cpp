// Malformed GGUF files: each must give one error line naming the file and the field, never a
// crash (run these under -DHEARTH_SANITIZE=ON too). Add a case: fabricate it with raw-bytes.h.
#include <gtest/gtest.h>

#include <memory>

#include "formats/gguf.h"
#include "raw-bytes.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using test::gguf_header;
using test::gguf_tensor_info;
using test::RawBytes;

// Parses a private, exactly-sized heap copy so ASan catches any read past the end.
Result<GgufFile> parse_copy(const std::vector<uint8_t>& bytes, size_t n) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[n ? n : 1]);
  if (n) std::memcpy(copy.get(), bytes.data(), n);
  // A successful result's views point into `copy`, freed here: callers only read metadata.
  return GgufFile::parse(copy.get(), n, "bad.gguf");
}

// The error for `bytes`, checked to be one line that starts with the file name.
std::string error_of(const std::vector<uint8_t>& bytes) {
  auto r = parse_copy(bytes, bytes.size());
  EXPECT_FALSE(r.is_ok()) << "parsed successfully";
  if (r.is_ok()) return "";
  const std::string& m = r.message();
  EXPECT_EQ(m.rfind("bad.gguf: ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  return m;
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// A small valid file: a few kv of assorted types and two tensors.
std::vector<uint8_t> small_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "hello"});
  w.set_f32_array("tokenizer.ggml.scores", {0, 0, -1.5f});
  GgufValue nested;
  nested.type = GgufType::ARRAY;
  nested.elem_type = GgufType::ARRAY;
  nested.items.resize(2);
  for (auto& it : nested.items) {
    it.type = GgufType::ARRAY;
    it.elem_type = GgufType::INT32;
    it.ints = {1, 2};
  }
  w.set_value("test.nested", nested);
  w.add_tensor("blk.0.attn_q.weight", DType::F32, {2, 4}, std::vector<uint8_t>(32, 1));
  w.add_tensor("output_norm.weight", DType::F16, {4}, std::vector<uint8_t>(8, 2));
  return w.to_bytes();
}

TEST(GgufBadInput, SmallFileIsValid) {
  auto bytes = small_file();
  auto r = parse_copy(bytes, bytes.size());
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->tensors().size(), 2u);
}

TEST(GgufBadInput, TruncatedAtEveryCutPoint) {
  const auto bytes = small_file();
  // Past the end of the last tensor's data only padding remains; any earlier cut is an error.
  uint64_t data_end = 0;
  std::vector<uint8_t> copy = bytes;
  auto full = GgufFile::parse(copy.data(), copy.size(), "bad.gguf");
  ASSERT_TRUE(full.is_ok()) << full.message();
  for (const TensorView& t : full->tensors())
    data_end = std::max<uint64_t>(
        data_end, uint64_t(static_cast<const uint8_t*>(t.data) - copy.data()) + t.nbytes);
  ASSERT_GT(data_end, 0u);
  ASSERT_LE(data_end, bytes.size());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = parse_copy(bytes, cut);
    if (cut < data_end) {
      ASSERT_FALSE(r.is_ok()) << "cut at " << cut;
      EXPECT_EQ(r.message().rfind("bad.gguf: ", 0), 0u) << r.message();
      EXPECT_EQ(r.message().find('\n'), std::string::npos) << r.message();
    }
  }
}

TEST(GgufBadInput, TruncatedRealModel) {
  // The first 1 MiB of a real model: header and metadata intact, tensor data missing.
  std::string head =
      test::read_file(test::shared_path("goldens/llama2-tiny/llama2-tiny-bf16.gguf"));
  ASSERT_GT(head.size(), 1u << 20);
  head.resize(1u << 20);
  const std::string m = error_of(std::vector<uint8_t>(head.begin(), head.end()));
  EXPECT_HAS(m, "extends past end of file (size 1048576)");
  EXPECT_HAS(m, "tensor '");
}

TEST(GgufBadInput, EmptyAndTiny) {
  EXPECT_HAS(error_of({}), "magic");
  EXPECT_HAS(error_of({'G', 'G'}), "magic");
  EXPECT_HAS(error_of({'G', 'G', 'U', 'F'}), "version");
  EXPECT_HAS(error_of({'G', 'G', 'U', 'F', 3, 0, 0, 0}), "tensor count");
}

TEST(GgufBadInput, WrongMagic) {
  auto bytes = small_file();
  bytes[0] = 'P';
  bytes[1] = 'K';
  const std::string m = error_of(bytes);
  EXPECT_HAS(m, "magic: not a GGUF file");
  EXPECT_HAS(m, "50 4b 55 46");
}

TEST(GgufBadInput, Version1IsRefusedClearly) {
  auto bytes = small_file();
  bytes[4] = 1;
  EXPECT_HAS(error_of(bytes), "version: GGUF v1 is not supported");
  bytes[4] = 7;
  EXPECT_HAS(error_of(bytes), "version: unsupported GGUF version 7 (expected 2 or 3)");
  bytes[4] = 0;
  bytes[7] = 3;  // 0x03000000: a big-endian file read as little-endian
  EXPECT_HAS(error_of(bytes), "big-endian");
}

TEST(GgufBadInput, Version2IsAccepted) {
  auto bytes = small_file();
  bytes[4] = 2;  // v2 and v3 share the layout
  auto r = parse_copy(bytes, bytes.size());
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->version(), 2u);
}

TEST(GgufBadInput, AbsurdCounts) {
  auto bytes = small_file();
  auto patched = bytes;
  const uint64_t huge = 1ull << 60;
  std::memcpy(&patched[8], &huge, 8);
  EXPECT_HAS(error_of(patched), "tensor count: 1152921504606846976 tensors cannot fit");
  patched = bytes;
  std::memcpy(&patched[16], &huge, 8);
  EXPECT_HAS(error_of(patched), "metadata kv count: 1152921504606846976 entries cannot fit");
  // A count that fits the size bound but not the real content still fails cleanly.
  patched = bytes;
  const uint64_t more = 9;
  std::memcpy(&patched[16], &more, 8);
  EXPECT_FALSE(parse_copy(patched, patched.size()).is_ok());
}

TEST(GgufBadInput, StringLengthPastEof) {
  RawBytes key = gguf_header(0, 1);
  key.u64(1000000000000ull).bytes("abc").zeros(16);
  EXPECT_HAS(error_of(key.b),
             "metadata key #0: string length 1000000000000 at offset 24 extends "
             "past end of file");
  RawBytes val = gguf_header(0, 1);
  val.str("general.name").u32(uint32_t(GgufType::STRING)).u64(1ull << 40).bytes("xyz");
  EXPECT_HAS(error_of(val.b), "metadata key 'general.name': string length 1099511627776");
  RawBytes name = gguf_header(1, 0);
  name.u64(77).bytes("blk.0").zeros(24);
  EXPECT_HAS(error_of(name.b), "tensor #0 name: string length 77");
}

TEST(GgufBadInput, ArrayCountPastEof) {
  RawBytes r = gguf_header(0, 1);
  r.str("tokenizer.ggml.tokens").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::STRING));
  r.u64(1000000).str("a").str("b");
  EXPECT_HAS(error_of(r.b),
             "metadata key 'tokenizer.ggml.tokens': array of 1000000 STRING "
             "elements at offset");
  RawBytes f = gguf_header(0, 1);
  f.str("scores").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::FLOAT32)).u64(3);
  f.put<float>(1).put<float>(2);
  EXPECT_HAS(error_of(f.b), "metadata key 'scores': array of 3 FLOAT32 elements");
  // The count fits the bound, but one string inside runs past the end.
  RawBytes s = gguf_header(0, 1);
  s.str("toks").u32(uint32_t(GgufType::ARRAY)).u32(uint32_t(GgufType::STRING)).u64(2);
  s.str("ok").u64(500).bytes("short");
  EXPECT_HAS(error_of(s.b), "element 1 of metadata key 'toks': string length 500");
}

TEST(GgufBadInput, BadMetadataTypes) {
  RawBytes t = gguf_header(0, 1);
  t.str("k").u32(13).u64(0);
  EXPECT_HAS(error_of(t.b), "metadata key 'k': unknown metadata value type 13");
  RawBytes e = gguf_header(0, 1);
  e.str("k").u32(uint32_t(GgufType::ARRAY)).u32(42).u64(0);
  EXPECT_HAS(error_of(e.b), "metadata key 'k': unknown array element type 42");
  RawBytes b = gguf_header(0, 1);
  b.str("flag").u32(uint32_t(GgufType::BOOL)).put<uint8_t>(2).zeros(16);
  EXPECT_HAS(error_of(b.b), "metadata key 'flag': bool value 2 is not 0 or 1");
  RawBytes d = gguf_header(0, 2);
  d.str("dup").u32(uint32_t(GgufType::UINT8)).put<uint8_t>(1);
  d.str("dup").u32(uint32_t(GgufType::UINT8)).put<uint8_t>(2);
  EXPECT_HAS(error_of(d.b), "metadata key 'dup': duplicate key");
  RawBytes k = gguf_header(0, 1);
  k.str("").u32(uint32_t(GgufType::UINT8)).put<uint8_t>(1);
  EXPECT_HAS(error_of(k.b), "metadata key #0: empty key");
}

TEST(GgufBadInput, NestingTooDeep) {
  RawBytes r = gguf_header(0, 1);
  r.str("deep").u32(uint32_t(GgufType::ARRAY));
  for (int i = 0; i < 40; ++i) r.u32(uint32_t(GgufType::ARRAY)).u64(1);
  r.u32(uint32_t(GgufType::UINT8)).u64(0);
  EXPECT_HAS(error_of(r.b), "metadata key 'deep': arrays nested deeper than");
}

TEST(GgufBadInput, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    RawBytes r = gguf_header(0, 1);
    r.str("general.alignment").u32(uint32_t(GgufType::UINT32)).u32(a);
    EXPECT_HAS(error_of(r.b), "general.alignment: " + std::to_string(a) + " is not a power of two");
  }
  RawBytes s = gguf_header(0, 1);
  s.str("general.alignment").u32(uint32_t(GgufType::STRING)).str("32");
  EXPECT_HAS(error_of(s.b), "general.alignment: has type STRING");
}

// One tensor file with a data section of `data_bytes` zeros after 32-byte padding.
std::vector<uint8_t> one_tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                                uint64_t offset, size_t data_bytes) {
  RawBytes r = gguf_header(1, 0);
  gguf_tensor_info(r, name, ne, type, offset);
  r.pad_to(32).zeros(data_bytes);
  return r.b;
}

TEST(GgufBadInput, TensorOutOfFile) {
  EXPECT_HAS(error_of(one_tensor("blk.0.attn_q.weight", {4, 2}, 0, 0, 16)),
             "tensor 'blk.0.attn_q.weight': data [offset 0, 32 bytes] extends past end of file");
  EXPECT_HAS(error_of(one_tensor("w", {4}, 0, 1ull << 40, 64)),
             "tensor 'w': data [offset 1099511627776, 16 bytes] extends past end of file");
  // An offset near 2^64 must not wrap around when added to the data start.
  EXPECT_HAS(error_of(one_tensor("w", {4}, 0, ~0ull - 31, 64)), "tensor 'w'");
}

TEST(GgufBadInput, TensorOffsetMisaligned) {
  EXPECT_HAS(error_of(one_tensor("w", {4}, 0, 8, 64)),
             "tensor 'w': offset 8 is not a multiple of the alignment 32");
}

TEST(GgufBadInput, OverlappingTensors) {
  RawBytes r = gguf_header(2, 0);
  gguf_tensor_info(r, "a", {16}, 0, 0);  // [0, 64)
  gguf_tensor_info(r, "b", {8}, 0, 32);  // [32, 64): inside a
  r.pad_to(32).zeros(128);
  EXPECT_HAS(error_of(r.b),
             "tensor 'b': data [offset 32, 32 bytes] overlaps tensor 'a' "
             "[offset 0, 64 bytes]");
  RawBytes same = gguf_header(2, 0);
  gguf_tensor_info(same, "x", {8}, 0, 0);
  gguf_tensor_info(same, "y", {8}, 0, 0);
  same.pad_to(32).zeros(64);
  EXPECT_HAS(error_of(same.b), "overlaps tensor");
}

TEST(GgufBadInput, DimsOverflowOrNonPositive) {
  EXPECT_HAS(error_of(one_tensor("big", {1ull << 32, 1ull << 32}, 0, 0, 64)),
             "tensor 'big': element count of dimensions overflows 64 bits");
  // Element count fits, byte count (x4 for F32) does not.
  EXPECT_HAS(error_of(one_tensor("big", {1ull << 62}, 0, 0, 64)),
             "tensor 'big': byte size overflows 64 bits");
  EXPECT_HAS(error_of(one_tensor("z", {4, 0}, 0, 0, 64)),
             "tensor 'z': dimension ne[1] = 0 must be positive");
  EXPECT_HAS(error_of(one_tensor("n", {~0ull}, 0, 0, 64)), "tensor 'n': dimension ne[0]");
  EXPECT_HAS(error_of(one_tensor("d", {1, 1, 1, 1, 1}, 0, 0, 64)),
             "tensor 'd': n_dims 5 exceeds 4");
}

TEST(GgufBadInput, UnknownTypeId) {
  EXPECT_HAS(error_of(one_tensor("blk.0.attn_q.weight", {32}, 99, 0, 256)),
             "bad.gguf: unknown tensor type id 99 (blk.0.attn_q.weight)");
  EXPECT_HAS(error_of(one_tensor("t", {32}, 4, 0, 256)), "unknown tensor type id 4 (t)");
}

TEST(GgufBadInput, RowNotDivisibleByBlockSize) {
  EXPECT_HAS(error_of(one_tensor("blk.0.ffn_up.weight", {33, 2}, uint32_t(DType::Q4_0), 0, 256)),
             "tensor 'blk.0.ffn_up.weight': row length 33 is not a multiple of the Q4_0 block "
             "size 32");
  EXPECT_HAS(error_of(one_tensor("k", {128}, uint32_t(DType::Q4_K), 0, 256)),
             "row length 128 is not a multiple of the Q4_K block size 256");
}

TEST(GgufBadInput, KnownButNotRunnableTypesParse) {
  // Q2_K is in the dtype table but not runnable: parsing succeeds, the model loader decides.
  auto bytes = one_tensor("blk.0.attn_q.weight", {256, 2}, uint32_t(DType::Q2_K), 0, 2 * 84);
  auto r = parse_copy(bytes, bytes.size());
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->tensors()[0].dtype, DType::Q2_K);
  EXPECT_EQ(r->tensors()[0].shape, (std::vector<int64_t>{2, 256}));
  EXPECT_EQ(r->tensors()[0].nbytes, 168u);
}

TEST(GgufBadInput, DuplicateOrEmptyTensorName) {
  RawBytes r = gguf_header(2, 0);
  gguf_tensor_info(r, "w", {8}, 0, 0);
  gguf_tensor_info(r, "w", {8}, 0, 32);
  r.pad_to(32).zeros(64);
  EXPECT_HAS(error_of(r.b), "tensor 'w': duplicate tensor name");
  EXPECT_HAS(error_of(one_tensor("", {8}, 0, 0, 64)), "tensor #0: empty name");
}

TEST(GgufBadInput, ControlCharactersInNamesStayOnOneLine) {
  const std::string m = error_of(one_tensor("evil\nname", {8}, 99, 0, 64));
  EXPECT_HAS(m, "evil\\x0aname");
}

TEST(GgufBadInput, OpenReportsMissingFile) {
  auto r = GgufFile::open(test::temp_dir() + "/does-not-exist.gguf");
  ASSERT_FALSE(r.is_ok());
  EXPECT_HAS(r.message(), "does-not-exist.gguf");
}

}  // namespace
}  // namespace hearth
