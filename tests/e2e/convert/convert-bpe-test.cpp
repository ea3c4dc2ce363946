// A byte-level BPE checkpoint (tokenizer.json) through `convert`: the "gpt2" tokenizer keys equal
// llama.cpp's GPT-2 vocab GGUF, and the converted model tokenizes llama.cpp's test vectors.
// The checkpoint is built here: GPT-2's vocabulary as tokenizer.json, a tiny random Llama.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/half.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "runtime/convert/convert.h"
#include "runtime/engine.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using nlohmann::json;

OwnedTensor random_bf16(const std::string& name, std::vector<int64_t> shape, uint32_t seed) {
  OwnedTensor t{name, DType::BF16, shape, {}};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const uint16_t h = f32_to_bf16((float(s >> 8) / 16777216.0f - 0.5f) * 0.2f);
    t.bytes.push_back(uint8_t(h & 0xFF));
    t.bytes.push_back(uint8_t(h >> 8));
  }
  return t;
}

// Writes an HF directory whose tokenizer.json holds the vocab GGUF's tokens and merges.
std::string make_bpe_checkpoint(const GgufFile& vocab) {
  const std::string dir = test::temp_dir() + "/gpt2-vocab-llama";
  std::filesystem::create_directories(dir);
  const auto tokens = vocab.get_string_array("tokenizer.ggml.tokens").value().value();
  const auto merges = vocab.get_string_array("tokenizer.ggml.merges").value().value();
  const auto types = vocab.get_int_array("tokenizer.ggml.token_type").value().value();
  json v = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 3)
      added.push_back({{"id", i}, {"content", tokens[i]}, {"special", true}});
    else
      v[tokens[i]] = i;
  }
  json tok = {
      {"model", {{"type", "BPE"}, {"vocab", v}, {"merges", merges}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"added_tokens", added}};
  test::write_file(dir + "/tokenizer.json", tok.dump());
  test::write_file(dir + "/tokenizer_config.json",
                   R"({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})");
  const int64_t n_vocab = int64_t(tokens.size()), d = 64, ff = 128;
  json cfg = {{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", n_vocab},
              {"hidden_size", d},
              {"intermediate_size", ff},
              {"num_hidden_layers", 1},
              {"num_attention_heads", 2},
              {"num_key_value_heads", 2},
              {"max_position_embeddings", 256},
              {"rms_norm_eps", 1e-5},
              {"tie_word_embeddings", true}};
  test::write_file(dir + "/config.json", cfg.dump());
  std::vector<OwnedTensor> w;
  uint32_t seed = 1;
  w.push_back(random_bf16("model.embed_tokens.weight", {n_vocab, d}, seed++));
  w.push_back(random_bf16("model.norm.weight", {d}, seed++));
  const std::string p = "model.layers.0.";
  for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight"})
    w.push_back(random_bf16(p + n, {d}, seed++));
  for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                        "self_attn.v_proj.weight", "self_attn.o_proj.weight"})
    w.push_back(random_bf16(p + n, {d, d}, seed++));
  w.push_back(random_bf16(p + "mlp.gate_proj.weight", {ff, d}, seed++));
  w.push_back(random_bf16(p + "mlp.up_proj.weight", {ff, d}, seed++));
  w.push_back(random_bf16(p + "mlp.down_proj.weight", {d, ff}, seed++));
  Status s = write_safetensors(dir + "/model.safetensors", w);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return dir;
}

TEST(ConvertBpe, TokenizerJsonBecomesLlamaCppGpt2Metadata) {
  const std::string vocab_path = test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf");
  auto vocab = GgufFile::open(vocab_path);
  ASSERT_TRUE(vocab.is_ok()) << vocab.message();
  const std::string dir = make_bpe_checkpoint(*vocab);
  const std::string out = test::temp_dir() + "/gpt2-vocab-llama.gguf";
  Status s = convert_hf_to_gguf(dir, out, "q8_0", nullptr, 2);
  ASSERT_TRUE(s.is_ok()) << s.message();

  auto f = GgufFile::open(out);
  ASSERT_TRUE(f.is_ok()) << f.message();
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre"})
    EXPECT_EQ(f->get_string(key).value(), vocab->get_string(key).value()) << key;
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").value(),
            vocab->get_string_array("tokenizer.ggml.tokens").value());
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges").value(),
            vocab->get_string_array("tokenizer.ggml.merges").value());
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").value(),
            vocab->get_int_array("tokenizer.ggml.token_type").value());
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
    EXPECT_EQ(f->get_int(key).value(), vocab->get_int(key).value()) << key;

  // The converted model loads and its tokenizer reproduces llama.cpp's vectors.
  LoadOptions opt;
  opt.n_threads = 2;
  auto engine = Engine::load(out, opt);
  ASSERT_TRUE(engine.is_ok()) << engine.message();
  const std::string inp = test::read_file(vocab_path + ".inp");
  const std::string outs = test::read_file(vocab_path + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    texts.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  std::istringstream lines(outs);
  std::string line;
  size_t checked = 0;
  for (size_t i = 0; i < texts.size() && std::getline(lines, line); ++i) {
    std::vector<int32_t> want;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) want.push_back(id);
    EXPECT_EQ((*engine)->tokenizer().encode(texts[i], false), want) << "input " << i;
    ++checked;
  }
  EXPECT_GT(checked, 20u);
}

}  // namespace
}  // namespace hearth
