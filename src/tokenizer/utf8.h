// Strict UTF-8 decoding/encoding and Unicode character classes (letters, numbers, white space)
// taken from ICU. Add a class here when a new pre-tokenizer pattern needs one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::utf8 {

inline constexpr uint32_t kReplacement = 0xFFFD;

// Decodes one code point at s[pos]. Returns the byte length (1-4) of a valid, shortest-form,
// non-surrogate sequence, or 0 when the bytes there are not valid UTF-8.
int decode(std::string_view s, size_t pos, uint32_t* cp);

// True when s[pos..] is a proper prefix of some valid sequence (more bytes could complete it).
bool is_incomplete_prefix(std::string_view s, size_t pos);

void append(std::string& out, uint32_t cp);

// Replaces every byte that does not start a valid sequence with U+FFFD (one per byte, as
// SentencePiece does).
std::string sanitize(std::string_view s);

// Unicode general-category tests (ICU). Code points above 0x10FFFF are none of these.
bool is_letter(uint32_t cp);      // \p{L}
bool is_number(uint32_t cp);      // \p{N}
bool is_whitespace(uint32_t cp);  // \s: the White_Space property

}  // namespace hearth::utf8
