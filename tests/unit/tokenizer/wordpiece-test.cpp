// WordPiece (BERT) on a small vocabulary in both stored forms (llama.cpp's GGUF "▁word"/"ing"
// and Hugging Face's "word"/"##ing"), expectations worked out by hand from BERT's algorithm:
// clean-up, CJK ideographs alone, lowercasing and accent stripping, punctuation splits, greedy
// longest-match-first pieces, [UNK] for a word with no cover.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "support/test-data.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece-tokenizer.h"

namespace hearth {
namespace {

using Ids = std::vector<int32_t>;

// id: text (GGUF form). Continuations have no marker; word starts carry U+2581.
const std::vector<std::string> kGgufTokens = {
    "[PAD]",    "[UNK]", "[CLS]", "[SEP]", "[MASK]", "▁un", "▁unaff", "able",
    "▁the",     "▁cafe", "▁!",    "▁,",    "▁hello", "ed",  "▁中",    "▁文",
    "▁running", "▁run",  "ning",  "▁a",    "ff",     "▁x"};

std::vector<std::string> hf_tokens() {  // the same vocabulary in vocab.txt form
  std::vector<std::string> out;
  for (const std::string& t : kGgufTokens) {
    if (t[0] == '[') {
      out.push_back(t);
    } else if (t.rfind("▁", 0) == 0) {
      out.push_back(t.substr(3));
    } else {
      out.push_back("##" + t);
    }
  }
  return out;
}

std::unique_ptr<Tokenizer> gguf_bert() {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "bert");
  w.set_string_array("tokenizer.ggml.tokens", kGgufTokens);
  std::vector<int32_t> types(kGgufTokens.size(), 1);
  for (int i = 0; i <= 4; ++i) types[i] = 3;
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 1);
  w.set_u32("tokenizer.ggml.cls_token_id", 2);
  w.set_u32("tokenizer.ggml.seperator_token_id", 3);
  w.set_u32("tokenizer.ggml.padding_token_id", 0);
  static std::vector<std::vector<uint8_t>> keep;
  keep.push_back(w.to_bytes());
  auto g = GgufFile::parse(keep.back().data(), keep.back().size(), "bert-fixture.gguf");
  EXPECT_TRUE(g.is_ok()) << g.message();
  if (!g.is_ok()) return nullptr;
  auto t = Tokenizer::from_gguf(g.value());
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

std::unique_ptr<Tokenizer> hf_bert() {
  WordPieceVocab v;
  v.tokens = hf_tokens();
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  for (int i = 0; i <= 4; ++i) v.types[i] = TokenType::kControl;
  v.unk_id = 1, v.bos_id = 2, v.eos_id = 3, v.pad_id = 0;
  auto t = WordPieceTokenizer::create(std::move(v), "vocab.txt");
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t.is_ok() ? std::unique_ptr<Tokenizer>(std::move(t).value()) : nullptr;
}

void check_encodings(const Tokenizer& t) {
  EXPECT_EQ(t.kind(), "bert (WordPiece)");
  EXPECT_EQ(t.encode("unaffable", false), (Ids{6, 7}));       // "unaff" + "##able"
  EXPECT_EQ(t.encode("Unaffable!", false), (Ids{6, 7, 10}));  // lowercased; "!" alone
  EXPECT_EQ(t.encode("unable", false), (Ids{5, 7}));
  EXPECT_EQ(t.encode("Café, HELLO", false), (Ids{9, 11, 12}));  // accents stripped
  EXPECT_EQ(t.encode("running", false), (Ids{16}));             // longest match first
  EXPECT_EQ(t.encode("runs", false), (Ids{1}));                 // "run" + no "##s": all [UNK]
  EXPECT_EQ(t.encode("a中文x", false), (Ids{19, 14, 15, 21}));  // ideographs are words
  EXPECT_EQ(t.encode("  the\t\xC2\xA0x\x01\n", false), (Ids{8, 21}));  // NBSP, control dropped
  EXPECT_EQ(t.encode("the", true), (Ids{2, 8, 3}));                    // [CLS] ... [SEP]
  EXPECT_EQ(t.encode("[MASK] the", false, true), (Ids{4, 8}));
  EXPECT_EQ(t.encode("[MASK] the", false, false), (Ids{1, 1, 1, 8}));  // "[", "mask", "]"
  EXPECT_EQ(t.encode(std::string(101, 'a'), false), (Ids{1}));         // over 100 characters
  EXPECT_EQ(t.encode("", true), (Ids{2, 3}));
  EXPECT_EQ(t.decode({2, 6, 7, 11, 8, 3}), " unaffable , the");
}

TEST(WordPiece, GgufPhantomSpaceForm) {
  auto t = gguf_bert();
  ASSERT_NE(t, nullptr);
  check_encodings(*t);
}

TEST(WordPiece, HuggingFaceHashForm) {
  auto t = hf_bert();
  ASSERT_NE(t, nullptr);
  check_encodings(*t);
}

// bert-base-uncased's tokenizer.json layout: BertNormalizer, BertPreTokenizer, [CLS] $A [SEP].
std::string write_bert_tokenizer_json(const std::string& name, const std::string& post) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object(),
                         added = nlohmann::ordered_json::array();
  const auto tokens = hf_tokens();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    if (i <= 4) added.push_back({{"id", i}, {"content", tokens[i]}, {"special", true}});
  }
  nlohmann::ordered_json j = {
      {"added_tokens", added},
      {"normalizer",
       {{"type", "BertNormalizer"},
        {"clean_text", true},
        {"handle_chinese_chars", true},
        {"strip_accents", nullptr},
        {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", nlohmann::ordered_json::parse(post)},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model",
       {{"type", "WordPiece"},
        {"unk_token", "[UNK]"},
        {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", 100},
        {"vocab", vocab}}}};
  const std::string dir = test::temp_dir() + "/" + name;
  test::run_command({"mkdir", "-p", dir});
  test::write_file(dir + "/tokenizer.json", j.dump());
  return dir;
}

TEST(WordPiece, HuggingFaceTokenizerJson) {
  for (
      const char* post :
      {R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
           {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]})",
       R"({"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]})"}) {
    static int serial = 0;
    const std::string dir = write_bert_tokenizer_json("bert-" + std::to_string(++serial), post);
    auto t = Tokenizer::from_hf_dir(dir);
    ASSERT_TRUE(t.is_ok()) << t.message();
    check_encodings(*t.value());
  }
}

TEST(WordPiece, BasicPreTokenizer) {
  using W = std::vector<std::string>;
  EXPECT_EQ(bert_pre_tokenize("Hello, World! naïve 日本語 don't", true, true),
            (W{"hello", ",", "world", "!", "naive", "日", "本", "語", "don", "'", "t"}));
  // Cased vocabularies keep case and accents; $ and ` are BERT punctuation (ASCII).
  EXPECT_EQ(bert_pre_tokenize("Naïve $5 `x`", false, false), (W{"Naïve", "$", "5", "`", "x", "`"}));
  EXPECT_EQ(bert_pre_tokenize("ＡＢ\u200bc", true, true), (W{"ａｂc"}));  // U+200B (Cf) dropped
}

TEST(WordPiece, VocabularyWithoutUnknownIsAnError) {
  WordPieceVocab v;
  v.tokens = {"a", "##b"};
  auto t = WordPieceTokenizer::create(std::move(v), "vocab.txt");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.message().find("vocab.txt"), std::string::npos) << t.message();
}

}  // namespace
}  // namespace hearth
