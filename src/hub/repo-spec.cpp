// Repo id parsing and validation; the rules mirror huggingface_hub's validate_repo_id so an id
// accepted here maps to the same cache folder there.
#include "hub/repo-spec.h"

#include <cctype>

namespace hearth::hub {

namespace {

Status check_part(const std::string& part, const std::string& whole) {
  if (part.empty()) return Status::error("repo id '" + whole + "': expected ORG/NAME");
  for (char c : part) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return Status::error("repo id '" + whole + "': character '" + std::string(1, c) +
                           "' is not allowed (use letters, digits, '-', '_', '.')");
  }
  if (part.find("--") != std::string::npos || part.find("..") != std::string::npos)
    return Status::error("repo id '" + whole + "': '--' and '..' are not allowed");
  if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.')
    return Status::error("repo id '" + whole + "': parts cannot start or end with '-' or '.'");
  return Status::ok();
}

}  // namespace

Result<RepoSpec> parse_repo_spec(const std::string& text) {
  RepoSpec spec;
  std::string id = text;
  if (size_t colon = text.find(':'); colon != std::string::npos) {
    id = text.substr(0, colon);
    spec.quant = text.substr(colon + 1);
    if (spec.quant.empty())
      return Status::error("repo id '" + text + "': empty quantization after ':'");
    for (char c : spec.quant) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
        return Status::error("repo id '" + text + "': quantization '" + spec.quant +
                             "' has an invalid character");
    }
  }
  size_t slash = id.find('/');
  if (slash == std::string::npos || id.find('/', slash + 1) != std::string::npos)
    return Status::error("repo id '" + text + "': expected ORG/NAME[:QUANT]");
  if (id.size() > 96) return Status::error("repo id '" + text + "': longer than 96 characters");
  HEARTH_TRY(check_part(id.substr(0, slash), text));
  HEARTH_TRY(check_part(id.substr(slash + 1), text));
  spec.repo_id = id;
  return spec;
}

bool looks_like_repo_spec(const std::string& text) {
  return parse_repo_spec(text).is_ok();
}

std::string repo_folder_name(const std::string& repo_id) {
  std::string out = "models--";
  for (char c : repo_id) {
    if (c == '/')
      out += "--";
    else
      out += c;
  }
  return out;
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  }
  return true;
}

}  // namespace hearth::hub
