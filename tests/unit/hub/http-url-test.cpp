// URL helpers of the HTTP layer: redirect resolution, percent-encoding of repo paths, and the
// same-origin rule that keeps the token away from CDN hosts.
#include <gtest/gtest.h>

#include "hub/http-client.h"

namespace hearth::hub {
namespace {

TEST(HttpUrl, ResolvesRedirects) {
  EXPECT_EQ(resolve_url("http://h:1/a/resolve/main/f", "/cdn/x"), "http://h:1/cdn/x");
  EXPECT_EQ(resolve_url("https://huggingface.co/a/b", "https://cdn.example/x?sig=1"),
            "https://cdn.example/x?sig=1");
}

TEST(HttpUrl, Encodes) {
  EXPECT_EQ(url_encode("dir/my file+1.gguf", true), "dir/my%20file%2B1.gguf");
  EXPECT_EQ(url_encode("refs/pr/1", false), "refs%2Fpr%2F1");
}

TEST(HttpUrl, SameOrigin) {
  EXPECT_TRUE(same_origin("https://huggingface.co/a", "https://huggingface.co"));
  EXPECT_TRUE(same_origin("https://huggingface.co:443/a", "https://huggingface.co"));
  EXPECT_FALSE(same_origin("https://cdn-lfs.hf.co/x", "https://huggingface.co"));
  EXPECT_FALSE(same_origin("http://127.0.0.1:2/x", "http://127.0.0.1:3"));
  EXPECT_FALSE(same_origin("http://huggingface.co/x", "https://huggingface.co"));
}

}  // namespace
}  // namespace hearth::hub
