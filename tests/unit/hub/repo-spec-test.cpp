// Repo id parsing: accepted shapes, the quant suffix, and the ids huggingface_hub rejects.
#include <gtest/gtest.h>

#include "hub/repo-spec.h"

namespace hearth::hub {
namespace {

TEST(RepoSpec, ParsesRepoAndQuant) {
  auto s = parse_repo_spec("TheBloke/Llama-2-7B-GGUF:Q4_K_M");
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->repo_id, "TheBloke/Llama-2-7B-GGUF");
  EXPECT_EQ(s->quant, "Q4_K_M");
  auto plain = parse_repo_spec("meta-llama/Llama-3.2-1B");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->quant, "");
}

TEST(RepoSpec, RejectsBadIds) {
  for (const char* bad :
       {"noslash", "a/b/c", "/abs/path", "./x/y", "org/", "/name", "a--b/c", "a/b..c", "org/na me",
        "org/name:", "-org/name", "org/name.", "a/b:Q4 K"}) {
    EXPECT_FALSE(parse_repo_spec(bad).is_ok()) << bad;
    EXPECT_FALSE(looks_like_repo_spec(bad)) << bad;
  }
  EXPECT_FALSE(parse_repo_spec("org/" + std::string(100, 'x')).is_ok());
}

TEST(RepoSpec, CacheFolderName) {
  EXPECT_EQ(repo_folder_name("TheBloke/Llama-2-7B-GGUF"), "models--TheBloke--Llama-2-7B-GGUF");
}

TEST(RepoSpec, CommitHash) {
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("0123456789abcdef0123456789abcdef0123456"));
}

}  // namespace
}  // namespace hearth::hub
