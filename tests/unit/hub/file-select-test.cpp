// File selection: :QUANT picks one GGUF case-insensitively, split GGUFs come whole, safetensors
// repos bring config/weights/index/tokenizer, --include globs choose exactly what matches.
#include <gtest/gtest.h>

#include "hub/file-select.h"

namespace hearth::hub {
namespace {

using Files = std::vector<std::string>;

const Files kGgufRepo = {".gitattributes",         "README.md",
                         "llama-2-7b.Q4_K_M.gguf", "llama-2-7b.Q4_K_S.gguf",
                         "llama-2-7b.Q4_K.gguf",   "llama-2-7b.Q8_0.gguf",
                         "mmproj-model-f16.gguf",  "config.json"};

TEST(FileSelect, QuantIsCaseInsensitiveAndWholeTag) {
  auto s = select_files(kGgufRepo, "q4_k_m", {}, "o/r");
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->files, Files{"llama-2-7b.Q4_K_M.gguf"});
  EXPECT_EQ(s->primary, "llama-2-7b.Q4_K_M.gguf");
  // Q4_K must not also pick Q4_K_M / Q4_K_S.
  auto k = select_files(kGgufRepo, "Q4_K", {}, "o/r");
  ASSERT_TRUE(k.is_ok()) << k.message();
  EXPECT_EQ(k->files, Files{"llama-2-7b.Q4_K.gguf"});
}

TEST(FileSelect, UnknownQuantListsAvailable) {
  auto s = select_files(kGgufRepo, "Q5_K_M", {}, "o/r");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("Q5_K_M"), std::string::npos);
  EXPECT_NE(s.message().find("Q8_0"), std::string::npos) << s.message();
}

TEST(FileSelect, SplitGgufFetchedWhole) {
  Files repo = {"Q8_0/model-Q8_0-00002-of-00003.gguf", "Q8_0/model-Q8_0-00001-of-00003.gguf",
                "Q8_0/model-Q8_0-00003-of-00003.gguf", "model-Q4_K_M.gguf"};
  auto s = select_files(repo, "Q8_0", {}, "o/r");
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->files.size(), 3u);
  EXPECT_EQ(s->primary, "Q8_0/model-Q8_0-00001-of-00003.gguf");
  // A listing missing a part is an error, not a partial model.
  repo.erase(repo.begin());
  EXPECT_FALSE(select_files(repo, "Q8_0", {}, "o/r").is_ok());
}

TEST(FileSelect, NoQuantPrefersSingleOrQ4KM) {
  auto s = select_files(kGgufRepo, "", {}, "o/r");
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->primary, "llama-2-7b.Q4_K_M.gguf");
  auto ambiguous = select_files({"a.Q8_0.gguf", "a.Q6_K.gguf"}, "", {}, "o/r");
  ASSERT_FALSE(ambiguous.is_ok());
  EXPECT_NE(ambiguous.message().find("Q6_K"), std::string::npos) << ambiguous.message();
  auto single = select_files({"README.md", "only.gguf"}, "", {}, "o/r");
  ASSERT_TRUE(single.is_ok());
  EXPECT_EQ(single->files, Files{"only.gguf"});
}

TEST(FileSelect, SafetensorsRepo) {
  Files repo = {".gitattributes",
                "README.md",
                "config.json",
                "generation_config.json",
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json",
                "tokenizer.json",
                "tokenizer_config.json",
                "special_tokens_map.json",
                "original/consolidated.00.pth",
                "onnx/model.onnx"};
  auto s = select_files(repo, "", {}, "o/r");
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->primary, "");
  EXPECT_EQ(s->files,
            (Files{"config.json", "generation_config.json", "model-00001-of-00002.safetensors",
                   "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                   "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"}));
}

TEST(FileSelect, IncludeGlobs) {
  auto s = select_files(kGgufRepo, "", {"*.json", "README*"}, "o/r");
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->files, (Files{"README.md", "config.json"}));
  auto none = select_files(kGgufRepo, "", {"*.bin"}, "o/r");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.message().find("*.bin"), std::string::npos);
  auto both = select_files(kGgufRepo, "Q8_0", {"README.md"}, "o/r");
  ASSERT_TRUE(both.is_ok());
  EXPECT_EQ(both->files, (Files{"README.md", "llama-2-7b.Q8_0.gguf"}));
  EXPECT_EQ(both->primary, "llama-2-7b.Q8_0.gguf");
}

TEST(FileSelect, NoModelFiles) {
  EXPECT_FALSE(select_files({"README.md"}, "", {}, "o/r").is_ok());
  EXPECT_FALSE(select_files({}, "Q4_0", {}, "o/r").is_ok());
}

TEST(Glob, Matching) {
  EXPECT_TRUE(glob_match("*.gguf", "a/b.gguf"));  // fnmatch: '*' crosses '/'
  EXPECT_TRUE(glob_match("model-\?\?\?\?\?-of-*.safetensors", "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(glob_match("[Rr]EADME.md", "README.md"));
  EXPECT_TRUE(glob_match("[!a]x", "bx"));
  EXPECT_FALSE(glob_match("[!a]x", "ax"));
  EXPECT_FALSE(glob_match("*.gguf", "a.gguf.json"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_FALSE(glob_match("?", ""));
  EXPECT_TRUE(glob_match("a*b*c", "axxbyyc"));
  EXPECT_FALSE(glob_match("a*b*c", "axxbyy"));
  EXPECT_TRUE(glob_match("[", "["));
}

TEST(Glob, QuantTag) {
  EXPECT_EQ(gguf_quant_tag("llama-2-7b.Q4_K_M.gguf"), "Q4_K_M");
  EXPECT_EQ(gguf_quant_tag("kjv-13m-q4_k_m.gguf"), "Q4_K_M");
  EXPECT_EQ(gguf_quant_tag("x/Model-IQ3_XS-00001-of-00002.gguf"), "IQ3_XS");
  EXPECT_EQ(gguf_quant_tag("model-bf16.gguf"), "BF16");
  EXPECT_EQ(gguf_quant_tag("model.gguf"), "");
  EXPECT_TRUE(name_has_quant("Q4_K_M/model-00001-of-00002.gguf", "q4_k_m"));
  EXPECT_FALSE(name_has_quant("model-IQ4_XS.gguf", "Q4_XS"));
}

}  // namespace
}  // namespace hearth::hub
