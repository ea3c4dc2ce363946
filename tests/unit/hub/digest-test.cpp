// Digests against known vectors (FIPS "abc", git's hash of "hello\n") and etag verification.
#include <gtest/gtest.h>

#include "hub/digest.h"
#include "support/test-data.h"

namespace hearth::hub {
namespace {

TEST(Digest, KnownVectors) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string path = test::temp_dir() + "/hello.txt";
  test::write_file(path, "hello\n");
  auto sha = sha256_file(path);
  ASSERT_TRUE(sha.is_ok());
  EXPECT_EQ(*sha, sha256_hex("hello\n"));
  auto git = git_blob_sha1_file(path);  // `git hash-object` of "hello\n"
  ASSERT_TRUE(git.is_ok());
  EXPECT_EQ(*git, "ce013625030ba8dba906f756967f9e9ca394464a");
}

TEST(Digest, VerifyAgainstEtag) {
  const std::string path = test::temp_dir() + "/v.bin";
  test::write_file(path, "hello\n");
  EXPECT_TRUE(verify_against_etag(path, sha256_hex("hello\n")).is_ok());
  EXPECT_TRUE(verify_against_etag(path, "CE013625030BA8DBA906F756967F9E9CA394464A").is_ok());
  Status bad = verify_against_etag(path, sha256_hex("hellO\n"));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("sha256 mismatch"), std::string::npos);
  EXPECT_FALSE(verify_against_etag(path, "0000000000000000000000000000000000000000").is_ok());
  EXPECT_FALSE(sha256_file(test::temp_dir() + "/missing").is_ok());
}

}  // namespace
}  // namespace hearth::hub
