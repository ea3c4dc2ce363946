// Algorithm-independent parts of Tokenizer: whole-sequence decode and the streaming UTF-8
// decoder. Factories live in tokenizer-gguf.cpp and tokenizer-hf.cpp.
#include "tokenizer/tokenizer.h"

#include "tokenizer/utf8.h"

namespace hearth {

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  // Raw bytes, so byte-level round trips are exact even for invalid UTF-8 input; StreamDecoder
  // is the path that guarantees valid UTF-8.
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  std::string bytes = tok_.token_bytes(id);
  if (strip_ && first_) {
    // SentencePiece drops the space of the first visible piece only; control tokens are
    // invisible and do not count, bytes and the unknown surface end the window.
    const TokenType t = tok_.token_type(id);
    const bool strippable =
        t != TokenType::kByte && t != TokenType::kControl && t != TokenType::kUnknown;
    if (strippable && !bytes.empty() && bytes[0] == ' ') {
      bytes.erase(0, 1);
      first_ = false;
    } else if (!bytes.empty()) {
      first_ = false;
    }
  }
  pending_ += bytes;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    uint32_t cp;
    const int n = utf8::decode(pending_, pos, &cp);
    if (n > 0) {
      out.append(pending_, pos, n);
      pos += n;
    } else if (utf8::is_incomplete_prefix(pending_, pos)) {
      break;  // wait for the rest of the character
    } else {
      utf8::append(out, utf8::kReplacement);
      ++pos;
    }
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::flush() {
  // Pending bytes are a lead byte plus continuation bytes: each is invalid on its own.
  std::string out;
  for (size_t i = 0; i < pending_.size(); ++i) utf8::append(out, utf8::kReplacement);
  pending_.clear();
  return out;
}

}  // namespace hearth
