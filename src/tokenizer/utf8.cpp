// Strict UTF-8 helpers and ICU-backed character classes. The classes of the Basic Multilingual
// Plane are cached in one table built on first use, since pre-tokenizers ask per character.
#include "tokenizer/utf8.h"

#include <unicode/uchar.h>

#include <array>
#include <mutex>

namespace hearth::utf8 {

int decode(std::string_view s, size_t pos, uint32_t* cp) {
  if (pos >= s.size()) return 0;
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  uint32_t v;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, v = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, v = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, v = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - pos < static_cast<size_t>(len)) return 0;
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

bool is_incomplete_prefix(std::string_view s, size_t pos) {
  const size_t avail = s.size() - pos;
  if (avail == 0) return false;
  const auto b0 = static_cast<uint8_t>(s[pos]);
  size_t len;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    if (b0 < 0xC2) return false;  // overlong whatever follows
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    if (b0 > 0xF4) return false;
  } else {
    return false;
  }
  if (avail >= len) return false;
  for (size_t i = 1; i < avail; ++i) {
    if ((static_cast<uint8_t>(s[pos + i]) & 0xC0) != 0x80) return false;
  }
  if (avail >= 2) {  // the second byte already rules out overlongs, surrogates, > U+10FFFF
    const auto b1 = static_cast<uint8_t>(s[pos + 1]);
    if (b0 == 0xE0 && b1 < 0xA0) return false;
    if (b0 == 0xED && b1 > 0x9F) return false;
    if (b0 == 0xF0 && b1 < 0x90) return false;
    if (b0 == 0xF4 && b1 > 0x8F) return false;
  }
  return true;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp;
    const int n = decode(s, pos, &cp);
    if (n == 0) {
      append(out, kReplacement);
      ++pos;
    } else {
      out.append(s.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

namespace {

enum : uint8_t { kLetterBit = 1, kNumberBit = 2, kSpaceBit = 4 };

uint8_t classify(uint32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  uint8_t bits = 0;
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      bits |= kLetterBit;
      break;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      bits |= kNumberBit;
      break;
    default:
      break;
  }
  if (u_isUWhiteSpace(c)) bits |= kSpaceBit;
  return bits;
}

const std::array<uint8_t, 0x10000>& bmp_table() {
  static std::array<uint8_t, 0x10000> table;
  static std::once_flag once;
  std::call_once(once, [] {
    for (uint32_t cp = 0; cp < 0x10000; ++cp) table[cp] = classify(cp);
  });
  return table;
}

uint8_t bits_of(uint32_t cp) {
  if (cp < 0x10000) return bmp_table()[cp];
  if (cp > 0x10FFFF) return 0;
  return classify(cp);
}

}  // namespace

bool is_letter(uint32_t cp) {
  return bits_of(cp) & kLetterBit;
}
bool is_number(uint32_t cp) {
  return bits_of(cp) & kNumberBit;
}
bool is_whitespace(uint32_t cp) {
  return bits_of(cp) & kSpaceBit;
}

}  // namespace hearth::utf8
