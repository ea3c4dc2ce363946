// Agreement with the SentencePiece library (test-only oracle) on generated strings, for the
// tokenizer built from tokenizer.model and the one built from GGUF metadata: encode and decode.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <random>

#include "formats/gguf.h"
#include "random-text.h"
#include "support/test-data.h"
#include "tokenizer/sentencepiece-model.h"
#include "tokenizer/spm-tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace hearth {
namespace {

constexpr int kStrings = 2500;

class SpmOracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = test::shared_path("models/llama2-tokenizer.model");
    sp_ = new sentencepiece::SentencePieceProcessor();
    const auto st = sp_->Load(model);
    load_error_ = st.ok() ? "" : st.ToString();
    const std::string bytes = test::read_file(model);
    auto v = parse_sentencepiece_model(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                       model);
    if (v.is_ok()) {
      auto t = SpmTokenizer::create(std::move(v).value(), model);
      if (t.is_ok()) from_model_ = std::move(t).value().release();
    } else {
      load_error_ += v.message();
    }
    auto g = GgufFile::open(test::shared_path("models/vocab/ggml-vocab-llama-spm.gguf"));
    if (g.is_ok()) {
      auto t = Tokenizer::from_gguf(g.value());
      if (t.is_ok())
        from_gguf_ = std::move(t).value().release();
      else
        load_error_ += t.message();
    } else {
      load_error_ += g.message();
    }
  }
  static void TearDownTestSuite() {
    delete sp_;
    delete from_model_;
    delete from_gguf_;
  }

  static std::string stream_decode(const Tokenizer& t, const std::vector<int32_t>& ids) {
    StreamDecoder d(t, /*strip_leading_space=*/true);
    std::string out;
    for (int32_t id : ids) out += d.push(id);
    return out + d.flush();
  }

  void check_agreement(const Tokenizer* tok) {
    ASSERT_TRUE(load_error_.empty()) << load_error_;
    ASSERT_NE(tok, nullptr);
    std::mt19937_64 rng(20240611);
    int enc_ok = 0, dec_ok = 0, invalid = 0;
    for (int i = 0; i < kStrings; ++i) {
      const std::string s = test::random_text(rng, /*allow_invalid=*/true);
      invalid += utf8::sanitize(s) != s;
      std::vector<int> expected;
      ASSERT_TRUE(sp_->Encode(s, &expected).ok());
      const auto ids = tok->encode(s, /*add_special=*/false);
      const bool same = std::vector<int32_t>(expected.begin(), expected.end()) == ids;
      EXPECT_TRUE(same) << "encode differs for string " << i << ": \"" << s << "\"";
      enc_ok += same;
      std::string expected_text;
      ASSERT_TRUE(sp_->Decode(expected, &expected_text).ok());
      const std::string text = stream_decode(*tok, ids);
      EXPECT_EQ(text, expected_text) << "decode differs for string " << i;
      dec_ok += text == expected_text;
    }
    EXPECT_GT(invalid, kStrings / 10);  // the generator really exercises invalid UTF-8
    EXPECT_EQ(enc_ok, kStrings);
    EXPECT_EQ(dec_ok, kStrings);
  }

  static sentencepiece::SentencePieceProcessor* sp_;
  static Tokenizer* from_model_;
  static Tokenizer* from_gguf_;
  static std::string load_error_;
};
sentencepiece::SentencePieceProcessor* SpmOracle::sp_ = nullptr;
Tokenizer* SpmOracle::from_model_ = nullptr;
Tokenizer* SpmOracle::from_gguf_ = nullptr;
std::string SpmOracle::load_error_;

TEST_F(SpmOracle, EncodeDecodeFromTokenizerModel) {
  check_agreement(from_model_);
}
TEST_F(SpmOracle, EncodeDecodeFromGguf) {
  check_agreement(from_gguf_);
}

// Decoding arbitrary id sequences (byte tokens that form invalid or split UTF-8, control
// tokens, <unk>) must match the library too.
TEST_F(SpmOracle, DecodeRandomIds) {
  ASSERT_TRUE(load_error_.empty()) << load_error_;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<int> ids(1 + rng() % 12);
    for (int& id : ids) {
      // Mostly byte tokens (3..258) so multi-byte characters split and break.
      id = rng() % 3 == 0 ? static_cast<int>(rng() % 32000) : static_cast<int>(rng() % 259);
    }
    std::string expected;
    ASSERT_TRUE(sp_->Decode(ids, &expected).ok());
    const std::vector<int32_t> ours(ids.begin(), ids.end());
    EXPECT_EQ(stream_decode(*from_model_, ours), expected) << "case " << i;
    EXPECT_EQ(stream_decode(*from_gguf_, ours), expected) << "case " << i;
  }
}

TEST_F(SpmOracle, BosEosRules) {
  ASSERT_TRUE(load_error_.empty()) << load_error_;
  for (const Tokenizer* t : {from_model_, from_gguf_}) {
    EXPECT_EQ(t->bos_id(), 1);
    EXPECT_EQ(t->eos_id(), 2);
    EXPECT_TRUE(t->add_bos());
    EXPECT_FALSE(t->add_eos());
    EXPECT_EQ(t->encode("", true), (std::vector<int32_t>{1}));
    const auto ids = t->encode("Hello", true);
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids[0], 1);
    EXPECT_TRUE(t->is_end_of_generation(2));
    EXPECT_FALSE(t->is_end_of_generation(1));
    // Control texts stay literal unless parse_special is asked for.
    EXPECT_NE(t->encode("<s>", false)[0], 1);
    EXPECT_EQ(t->encode("<s>hi</s>", false, true),
              (std::vector<int32_t>{1, t->encode("hi", false)[0], 2}));
    EXPECT_EQ(t->token_bytes(1), "");
    EXPECT_EQ(t->token_text(1), "<s>");
    EXPECT_EQ(t->token_type(1), TokenType::kControl);
    EXPECT_EQ(t->token_bytes(3 + 0x41), "A");
    EXPECT_EQ(t->token_bytes(-1), "");
    EXPECT_EQ(t->token_bytes(32000), "");
  }
}

TEST(SpmHfDir, FromGoldensDirectory) {
  auto t = Tokenizer::from_hf_dir(test::shared_path("goldens/llama2-tiny"));
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t.value()->kind(), "llama (SentencePiece BPE)");
  EXPECT_EQ(t.value()->n_vocab(), 32000);
  EXPECT_TRUE(t.value()->add_bos());
  EXPECT_EQ(t.value()->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
}

}  // namespace
}  // namespace hearth
