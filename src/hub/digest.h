// Content digests used to verify a download before its blob becomes visible: sha256 (the etag of
// LFS files) and git's blob sha1 (the etag of small files). Add a kind here if the Hub adds one.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace hearth::hub {

// Lowercase hex sha256 of a whole file.
Result<std::string> sha256_file(const std::string& path);
// Lowercase hex sha1 of "blob <size>\0" + contents: what git (and the Hub's ETag) calls the oid.
Result<std::string> git_blob_sha1_file(const std::string& path);
// Digest of a byte string, for tests and small payloads.
std::string sha256_hex(const std::string& bytes);

// Checks a downloaded file against its etag: 64 hex = sha256, 40 hex = git blob sha1. Other etag
// shapes cannot be checked and pass (the size check still applies). Error names both digests.
Status verify_against_etag(const std::string& path, const std::string& etag);

}  // namespace hearth::hub
