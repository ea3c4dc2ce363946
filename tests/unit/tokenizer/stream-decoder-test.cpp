// StreamDecoder: multi-byte characters split across byte tokens are held until whole, invalid
// bytes become U+FFFD, the leading space is stripped only when asked, flush() ends cleanly.
#include <gtest/gtest.h>

#include "support/test-data.h"
#include "tokenizer/sentencepiece-model.h"
#include "tokenizer/spm-tokenizer.h"

namespace hearth {
namespace {

std::unique_ptr<SpmTokenizer> llama2() {
  const std::string b = test::read_file(test::shared_path("models/llama2-tokenizer.model"));
  auto v = parse_sentencepiece_model(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "m");
  EXPECT_TRUE(v.is_ok()) << v.message();
  auto t = SpmTokenizer::create(std::move(v).value(), "m");
  return std::move(t).value();
}
int32_t byte_id(uint8_t b) {
  return 3 + b;
}  // Llama 2: <0x00> is id 3

TEST(StreamDecoder, HoldsSplitCharacter) {
  auto t = llama2();
  StreamDecoder d(*t);
  // 🦙 = F0 9F A6 99, fed one byte token at a time.
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.push(byte_id(0xA6)), "");
  EXPECT_EQ(d.push(byte_id(0x99)), "🦙");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacement) {
  auto t = llama2();
  StreamDecoder d(*t);
  EXPECT_EQ(d.push(byte_id(0xFF)), "\xEF\xBF\xBD");
  EXPECT_EQ(d.push(byte_id(0xE2)), "");
  EXPECT_EQ(d.push(byte_id(0x82)), "");
  // A new character starts before the old one finished: both held bytes are invalid.
  EXPECT_EQ(d.push(byte_id('A')),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(d.push(byte_id(0xC3)), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
}

TEST(StreamDecoder, LeadingSpaceStrip) {
  auto t = llama2();
  const auto ids = t->encode("Hello world", false);
  StreamDecoder keep(*t, false), strip(*t, true);
  std::string a, b;
  for (int32_t id : ids) a += keep.push(id), b += strip.push(id);
  EXPECT_EQ(a, " Hello world");
  EXPECT_EQ(b, "Hello world");
  StreamDecoder after_bos(*t, true);
  EXPECT_EQ(after_bos.push(1), "");  // <s> is invisible and does not end the strip window
  EXPECT_EQ(after_bos.push(ids[0]), "Hello");
  EXPECT_EQ(after_bos.push(ids[1]), " world");
}

}  // namespace
}  // namespace hearth
