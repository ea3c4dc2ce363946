// Code point ranges -> UTF-8 byte-range sequences, so a character class can be matched byte by
// byte: [a-ÿ] becomes [a-\x7F] | [\xC2-\xC3][\x80-\xBF]. Surrogates (D800-DFFF) never match.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth {

using CodepointRange = std::pair<uint32_t, uint32_t>;  // inclusive
using ByteRange = std::pair<uint8_t, uint8_t>;         // inclusive
using ByteRangeSequence = std::vector<ByteRange>;      // one range per byte of the encoding

// Sorted, merged ranges of `ranges`; `negate` takes the complement within U+0000..U+10FFFF.
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negate);

// Byte-range sequences whose union is exactly the valid UTF-8 encodings of the code points in
// `ranges` (which must be normalized).
std::vector<ByteRangeSequence> utf8_sequences(const std::vector<CodepointRange>& ranges);

// Decodes the code point at s[*pos] and advances *pos past it; false (and *pos unchanged) on
// invalid or truncated UTF-8, overlong forms, surrogates and values past U+10FFFF.
bool decode_utf8(std::string_view s, size_t* pos, uint32_t* cp);

// Appends the UTF-8 encoding of a code point (<= 0x10FFFF, not a surrogate).
void append_utf8(uint32_t cp, std::vector<uint8_t>* out);

}  // namespace hearth
