// llama.cpp's tokenizer vectors (../shared/models/vocab/*.gguf + .inp/.out): every string must
// give exactly the recorded ids (no BOS). .inp: strings each followed by "\n__ggml_vocab_test__\n".
#include <gtest/gtest.h>

#include <sstream>

#include "formats/gguf.h"
#include "support/test-data.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

std::vector<std::string> read_inputs(const std::string& path) {
  const std::string text = test::read_file(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find(sep, pos);
    if (end == std::string::npos) break;  // the file ends with a separator
    out.push_back(text.substr(pos, end - pos));
    pos = end + sep.size();
  }
  EXPECT_EQ(pos, text.size()) << path << ": trailing text after the last separator";
  return out;
}

std::vector<std::vector<int32_t>> read_outputs(const std::string& path) {
  std::istringstream in(test::read_file(path));
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (ls >> id) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

void check_vocab(const std::string& name, const std::string& expected_kind) {
  const std::string path = test::shared_path("models/vocab/" + name);
  auto gguf = GgufFile::open(path);
  ASSERT_TRUE(gguf.is_ok()) << gguf.message();
  auto tok = Tokenizer::from_gguf(gguf.value());
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  EXPECT_EQ(tok.value()->kind(), expected_kind);
  const auto inputs = read_inputs(path + ".inp");
  const auto outputs = read_outputs(path + ".out");
  ASSERT_EQ(inputs.size(), outputs.size());
  ASSERT_GE(inputs.size(), 40u);
  int passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = tok.value()->encode(inputs[i], /*add_special=*/false);
    EXPECT_EQ(ids, outputs[i]) << name << " case " << i << ": \"" << inputs[i] << "\"";
    passed += ids == outputs[i];
  }
  EXPECT_EQ(passed, static_cast<int>(inputs.size()));
}

TEST(VocabVectors, LlamaSpm) {
  check_vocab("ggml-vocab-llama-spm.gguf", "llama (SentencePiece BPE)");
}
TEST(VocabVectors, Gpt2) {
  check_vocab("ggml-vocab-gpt-2.gguf", "gpt2 (byte-level BPE)");
}
TEST(VocabVectors, DeepSeekCoder) {
  check_vocab("ggml-vocab-deepseek-coder.gguf", "gpt2 (byte-level BPE)");
}
TEST(VocabVectors, Mpt) {
  check_vocab("ggml-vocab-mpt.gguf", "gpt2 (byte-level BPE)");
}
TEST(VocabVectors, Refact) {
  check_vocab("ggml-vocab-refact.gguf", "gpt2 (byte-level BPE)");
}

}  // namespace
}  // namespace hearth
