// tokenizer.model parsing: the real Llama 2 model's fields, and corrupt protobufs (truncations,
// bad varints, lengths past the end, wrong types) giving one-line errors, never crashes.
#include <gtest/gtest.h>

#include "support/test-data.h"
#include "tokenizer/sentencepiece-model.h"

namespace hearth {
namespace {

Result<SpmVocab> parse(const std::string& b) {
  return parse_sentencepiece_model(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "t.model");
}

std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) s.push_back(static_cast<char>((v & 0x7F) | 0x80)), v >>= 7;
  s.push_back(static_cast<char>(v));
  return s;
}
std::string field(int f, const std::string& payload) {  // length-delimited
  return varint((f << 3) | 2) + varint(payload.size()) + payload;
}
std::string piece(const std::string& p, int type) {
  return field(1, field(1, p) + std::string("\x15\0\0\0\0", 5) + varint(3 << 3) + varint(type));
}
std::string bpe_trainer() {
  return field(2, varint(3 << 3) + varint(2));
}

TEST(SpmModelParse, Llama2Model) {
  auto v = parse(test::read_file(test::shared_path("models/llama2-tokenizer.model")));
  ASSERT_TRUE(v.is_ok()) << v.message();
  EXPECT_EQ(v->pieces.size(), 32000u);
  EXPECT_EQ(v->pieces[1], "<s>");
  EXPECT_EQ(v->types[3], TokenType::kByte);
  EXPECT_EQ(v->unk_id, 0);
  EXPECT_EQ(v->bos_id, 1);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->pad_id, -1);  // stored as a sign-extended 10-byte varint
  EXPECT_TRUE(v->byte_fallback);
  EXPECT_TRUE(v->add_dummy_prefix);
  EXPECT_FALSE(v->remove_extra_whitespaces);
}

TEST(SpmModelParse, MinimalModelAndDefaults) {
  const std::string m =
      piece("<unk>", 2) + piece("<s>", 3) + piece("</s>", 3) + piece("a", 1) + bpe_trainer();
  auto v = parse(m);
  ASSERT_TRUE(v.is_ok()) << v.message();
  EXPECT_EQ(v->pieces.size(), 4u);
  EXPECT_TRUE(v->remove_extra_whitespaces);  // proto default when normalizer_spec is absent
}

TEST(SpmModelParse, BadDataIsAnError) {
  const std::string good = piece("<unk>", 2) + piece("<s>", 3) + piece("</s>", 3) + bpe_trainer();
  struct Case {
    std::string bytes, needle;
  };
  const std::vector<Case> cases = {
      {"", "no pieces"},
      {good.substr(0, good.size() - 1), "past end"},
      {std::string("\x0A\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x01", 12), "field 1"},
      {std::string("\x0A\x80", 2), "field 1"},
      {good + std::string("\x00", 1), "tag"},
      {good + std::string("\x0B", 1), "malformed"},  // group wire type
      {piece("x", 9) + bpe_trainer(), "type"},
      {good + piece("<0xZZ>", 6), "byte token"},
      {good.substr(0, good.size() - bpe_trainer().size()), "UNIGRAM"},
      {good + field(2, varint(41 << 3) + varint(99)), "bos_id 99"},
      {good + field(3, field(2, "xx")), "precompiled_charsmap"},
      {field(1, field(1, "a") + std::string("\x15\0\0", 3)) + bpe_trainer(), "score"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto v = parse(cases[i].bytes);
    ASSERT_FALSE(v.is_ok()) << "case " << i;
    EXPECT_NE(v.message().find("t.model"), std::string::npos) << v.message();
    EXPECT_NE(v.message().find(cases[i].needle), std::string::npos)
        << "case " << i << ": " << v.message();
    EXPECT_EQ(v.message().find('\n'), std::string::npos);
  }
}

TEST(SpmModelParse, TruncationsNeverCrash) {
  const std::string m = test::read_file(test::shared_path("models/llama2-tokenizer.model"));
  ASSERT_GT(m.size(), 1000u);
  for (size_t cut = 0; cut < 4000; cut += 7) parse(m.substr(0, cut));
  // Cuts at field boundaries can be valid protobuf; a cut inside the last field never is.
  for (size_t cut = m.size() - 600; cut < m.size(); cut += 5) parse(m.substr(0, cut));
  EXPECT_FALSE(parse(m.substr(0, m.size() - 1)).is_ok());
}

}  // namespace
}  // namespace hearth
