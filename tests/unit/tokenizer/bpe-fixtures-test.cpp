// Byte-level BPE fixtures built by the test: a small Llama-3-style and Qwen2-style vocabulary as
// GGUF (GgufWriter) and as tokenizer.json; exact ids, special tokens, and decode(encode(s)) == s.
#include <gtest/gtest.h>

#include <random>

#include "formats/gguf.h"
#include "random-text.h"
#include "support/test-data.h"
#include "tokenizer/bpe-tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace hearth {
namespace {

// ids 0..255: one token per byte (id == byte); then merges; then special tokens.
std::vector<std::string> fixture_tokens() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append(s, byte_to_unicode(static_cast<uint8_t>(b)));
    t.push_back(s);
  }
  for (const char* m : {"Ġt", "he", "Ġthe", "12", "123", "'s", "ĊĊ", "ĠĠ"}) t.push_back(m);
  t.push_back("<|begin_of_text|>");  // 264, control
  t.push_back("<|eot_id|>");         // 265, control
  t.push_back("<tool>");             // 266, user-defined
  return t;
}
const std::vector<std::string> kMerges = {"Ġ t",  "h e", "Ġt he", "1 2",
                                          "12 3", "' s", "Ċ Ċ",   "Ġ Ġ"};

std::unique_ptr<Tokenizer> gguf_fixture(const std::string& pre) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  const auto tokens = fixture_tokens();
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(tokens.size(), 1);
  types[264] = types[265] = 3;
  types[266] = 4;
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", kMerges);
  w.set_u32("tokenizer.ggml.bos_token_id", 264);
  w.set_u32("tokenizer.ggml.eos_token_id", 265);
  static std::vector<std::vector<uint8_t>> keep;  // GgufFile::parse needs the bytes alive
  keep.push_back(w.to_bytes());
  auto g = GgufFile::parse(keep.back().data(), keep.back().size(), "fixture-" + pre + ".gguf");
  EXPECT_TRUE(g.is_ok()) << g.message();
  if (!g.is_ok()) return nullptr;
  auto t = Tokenizer::from_gguf(g.value());
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      o += '\\', o += static_cast<char>(c);
    else
      o += static_cast<char>(c);
  }
  return o;
}

// tokenizer.json's model.vocab body for tokens [0, n): "text":id,...
std::string vocab_json(const std::vector<std::string>& tokens, size_t n) {
  std::string vocab;
  for (size_t i = 0; i < n; ++i) {
    vocab +=
        (i ? "," : "") + std::string("\"") + json_escape(tokens[i]) + "\":" + std::to_string(i);
  }
  return vocab;
}

std::unique_ptr<Tokenizer> json_fixture(const std::string& regex, bool pair_merges,
                                        const std::string& dir_name) {
  const auto tokens = fixture_tokens();
  const std::string vocab = vocab_json(tokens, 264);
  std::string merges;
  for (size_t i = 0; i < kMerges.size(); ++i) {
    const size_t sp = kMerges[i].find(' ');
    merges += i ? "," : "";
    if (pair_merges) {
      merges += "[\"" + kMerges[i].substr(0, sp) + "\",\"" + kMerges[i].substr(sp + 1) + "\"]";
    } else {
      merges += "\"" + kMerges[i] + "\"";
    }
  }
  const std::string json = R"({"version":"1.0","added_tokens":[
 {"id":264,"content":"<|begin_of_text|>","special":true},
 {"id":265,"content":"<|eot_id|>","special":true},
 {"id":266,"content":"<tool>","special":false}],
 "normalizer":null,
 "pre_tokenizer":{"type":"Sequence","pretokenizers":[
   {"type":"Split","pattern":{"Regex":")" +
                           json_escape(regex) + R"("},"behavior":"Isolated","invert":false},
   {"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]},
 "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}]},
 "decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
 "model":{"type":"BPE","ignore_merges":true,"vocab":{)" +
                           vocab + R"(},"merges":[)" + merges + "]}}";
  const std::string dir = test::temp_dir() + "/" + dir_name;
  test::run_command({"mkdir", "-p", dir});
  test::write_file(dir + "/tokenizer.json", json);
  test::write_file(
      dir + "/tokenizer_config.json",
      R"({"add_bos_token": true, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})");
  auto t = Tokenizer::from_hf_dir(dir);
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using Ids = std::vector<int32_t>;

// Pieces (Llama 3): "the" " " "123" "45" " he" "'s" "\n\n" " " " x"
const Ids kLlama3Ids = {116, 257, 32, 260, 52, 53, 32, 257, 261, 262, 32, 32, 120};
// Pieces (Qwen2): digits one by one
const Ids kQwen2Ids = {116, 257, 32, 49, 50, 51, 52, 53, 32, 257, 261, 262, 32, 32, 120};
const char* kText = "the 12345 he's\n\n  x";

void check_common(const Tokenizer& t, const Ids& expected) {
  EXPECT_EQ(t.kind(), "gpt2 (byte-level BPE)");
  EXPECT_EQ(t.encode(kText, false), expected);
  EXPECT_EQ(t.decode(expected), kText);
  // " the" merges all the way; "<tool>" is always one id; control only with parse_special.
  EXPECT_EQ(t.encode(" the<tool>", false), (Ids{258, 266}));
  EXPECT_EQ(t.encode("<|eot_id|>", false, true), (Ids{265}));
  EXPECT_NE(t.encode("<|eot_id|>", false, false), (Ids{265}));
  EXPECT_EQ(t.encode("hi", true), (Ids{264, 104, 105}));
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.bos_id(), 264);
  EXPECT_EQ(t.eos_id(), 265);
  EXPECT_TRUE(t.is_end_of_generation(265));
  EXPECT_EQ(t.token_bytes(264), "");
  EXPECT_EQ(t.token_bytes(266), "<tool>");
  EXPECT_EQ(t.token_bytes(256), " t");
  EXPECT_EQ(t.token_text(256), "Ġt");
  // Invalid UTF-8 and emoji survive byte for byte.
  const std::string odd =
      "\xFF"
      "ab \xF0\x9F\x98 👍🏽";
  EXPECT_EQ(t.decode(t.encode(odd, false)), odd);
}

TEST(BpeFixtures, Llama3FromGguf) {
  auto t = gguf_fixture("llama-bpe");
  ASSERT_NE(t, nullptr);
  check_common(*t, kLlama3Ids);
}
TEST(BpeFixtures, Qwen2FromGguf) {
  auto t = gguf_fixture("qwen2");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->encode(kText, false), kQwen2Ids);
}
TEST(BpeFixtures, Llama3FromTokenizerJson) {
  auto t = json_fixture(kLlama3Regex, false, "llama3");
  ASSERT_NE(t, nullptr);
  check_common(*t, kLlama3Ids);
}
TEST(BpeFixtures, Qwen2FromTokenizerJsonPairMerges) {
  auto t = json_fixture(kQwen2Regex, true, "qwen2");
  ASSERT_NE(t, nullptr);
  check_common(*t, kQwen2Ids);
}

TEST(BpeFixtures, UnsupportedInputsAreErrors) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "no-such-pre");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
  w.set_string_array("tokenizer.ggml.merges", {"a b"});
  auto bytes = w.to_bytes();
  auto g = GgufFile::parse(bytes.data(), bytes.size(), "bad.gguf");
  ASSERT_TRUE(g.is_ok()) << g.message();
  auto t = Tokenizer::from_gguf(g.value());
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.message().find("tokenizer.ggml.pre"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("bad.gguf"), std::string::npos) << t.message();

  GgufWriter w2;
  w2.set_string("tokenizer.ggml.model", "gpt2");
  w2.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  w2.set_string_array("tokenizer.ggml.merges", {"a c"});
  bytes = w2.to_bytes();
  auto g2 = GgufFile::parse(bytes.data(), bytes.size(), "bad2.gguf");
  ASSERT_TRUE(g2.is_ok()) << g2.message();
  auto t2 = Tokenizer::from_gguf(g2.value());
  ASSERT_FALSE(t2.is_ok());
  EXPECT_NE(t2.message().find("merges[0]"), std::string::npos) << t2.message();
}

// A vocabulary without a token for one byte (0xF1 here: refact's lacks it, so U+40000-U+7FFFF
// cannot be spelt). A GGUF drops the byte, as llama.cpp does: its unknown_token_id (refact's is
// <|endoftext|>) must not end the text inside a prompt. A tokenizer.json emits its model's
// unk_token there, as Hugging Face's BPE model does.
TEST(BpeFixtures, AByteWithoutATokenIsDroppedOrTheModelsUnk) {
  auto tokens = fixture_tokens();
  tokens.resize(256);
  tokens[0xF1] = "<unk>";  // the byte's token replaced: no token spells 0xF1 any more
  const std::string text =
      "a\xF1\x90\x80\x80"
      "b";

  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(tokens.size(), 1);
  types[0xF1] = 2;  // unknown
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {});
  w.set_u32("tokenizer.ggml.unknown_token_id", 0xF1);
  const auto bytes = w.to_bytes();
  auto g = GgufFile::parse(bytes.data(), bytes.size(), "missing-byte.gguf");
  ASSERT_TRUE(g.is_ok()) << g.message();
  auto from_gguf = Tokenizer::from_gguf(g.value());
  ASSERT_TRUE(from_gguf.is_ok()) << from_gguf.message();
  EXPECT_EQ((*from_gguf)->encode(text, false), (Ids{'a', 0x90, 0x80, 0x80, 'b'}));

  const std::string vocab = vocab_json(tokens, tokens.size());
  const std::string dir = test::temp_dir() + "/missing-byte";
  test::run_command({"mkdir", "-p", dir});
  test::write_file(dir + "/tokenizer.json",
                   R"({"version":"1.0","added_tokens":[],"normalizer":null,
 "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},
 "decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},
 "model":{"type":"BPE","unk_token":"<unk>","vocab":{)" +
                       vocab + R"(},"merges":[]}})");
  auto from_json = Tokenizer::from_hf_dir(dir);
  ASSERT_TRUE(from_json.is_ok()) << from_json.message();
  EXPECT_EQ((*from_json)->encode(text, false), (Ids{'a', 0xF1, 0x90, 0x80, 0x80, 'b'}));
}

// decode(encode(s)) == s on generated strings, invalid UTF-8 included, for the real GPT-2 vocab
// and both fixture pre-tokenizers.
TEST(BpeFixtures, RoundTripGeneratedStrings) {
  auto g = GgufFile::open(test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(g.is_ok()) << g.message();
  auto gpt2 = Tokenizer::from_gguf(g.value());
  ASSERT_TRUE(gpt2.is_ok()) << gpt2.message();
  auto llama3 = gguf_fixture("llama-bpe");
  auto qwen2 = json_fixture(kQwen2Regex, false, "qwen2-rt");
  ASSERT_NE(llama3, nullptr);
  ASSERT_NE(qwen2, nullptr);
  std::mt19937_64 rng(99);
  int ok = 0;
  const int kStrings = 2500;
  for (int i = 0; i < kStrings; ++i) {
    const std::string s = test::random_text(rng, /*allow_invalid=*/true);
    bool all = true;
    for (const Tokenizer* t : {gpt2.value().get(), llama3.get(), qwen2.get()}) {
      const std::string back = t->decode(t->encode(s, false));
      EXPECT_EQ(back, s) << t->kind() << " case " << i;
      all &= back == s;
    }
    ok += all;
  }
  EXPECT_EQ(ok, kStrings);
}

}  // namespace
}  // namespace hearth
