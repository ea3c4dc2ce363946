#include "base/printable.h"

namespace hearth {

std::string printable(std::string_view text, size_t max_bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace hearth
