// sha256 / git-sha1 over files with OpenSSL's EVP interface, read in 1 MiB chunks so multi-GB
// weights never sit in memory.
#include "hub/digest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace hearth::hub {

namespace {

std::string to_hex(const unsigned char* d, unsigned n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (unsigned i = 0; i < n; ++i) {
    out += digits[d[i] >> 4];
    out += digits[d[i] & 15];
  }
  return out;
}

using MdCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

// prefix is hashed before the file's bytes (git's "blob <size>\0" header).
Result<std::string> digest_file(const std::string& path, const EVP_MD* md, bool git_blob) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  MdCtx ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1)
    return Status::error(path + ": digest initialisation failed");
  if (git_blob) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return Status::error(path + ": stat failed: " + std::strerror(errno));
    std::string header = "blob " + std::to_string(uint64_t(st.st_size));
    EVP_DigestUpdate(ctx.get(), header.data(), header.size() + 1);  // includes the NUL
  }
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::error(path + ": read failed: " + std::strerror(errno));
    if (got == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), size_t(got));
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), out, &len) != 1)
    return Status::error(path + ": digest finalisation failed");
  return to_hex(out, len);
}

bool is_hex(const std::string& s) {
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<std::string> sha256_file(const std::string& path) {
  return digest_file(path, EVP_sha256(), false);
}

Result<std::string> git_blob_sha1_file(const std::string& path) {
  return digest_file(path, EVP_sha1(), true);
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(bytes.data(), bytes.size(), out, &len, EVP_sha256(), nullptr);
  return to_hex(out, len);
}

Status verify_against_etag(const std::string& path, const std::string& etag) {
  const std::string want = lower(etag);
  if (!is_hex(want) || (want.size() != 64 && want.size() != 40)) return Status::ok();
  const bool sha256 = want.size() == 64;
  HEARTH_ASSIGN_OR_RETURN(std::string got, sha256 ? sha256_file(path) : git_blob_sha1_file(path));
  if (got != want)
    return Status::error(std::string(sha256 ? "sha256" : "git sha1") + " mismatch: expected " +
                         want + ", got " + got + " (the download was corrupted and was discarded)");
  return Status::ok();
}

}  // namespace hearth::hub
