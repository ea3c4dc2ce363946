// utf8-ranges.h: the range splitting follows the usual construction (split at encoding-length
// boundaries, then wherever lo and hi differ above a continuation-byte boundary that they do not
// fill), which leaves ranges whose encodings are products of per-byte ranges.
#include "grammar/utf8-ranges.h"

#include <algorithm>

namespace hearth {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

int utf8_length(uint32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

std::vector<uint8_t> encode(uint32_t cp) {
  std::vector<uint8_t> out;
  append_utf8(cp, &out);
  return out;
}

// [lo, hi] with the same encoded length and no surrogates inside.
void split_same_length(uint32_t lo, uint32_t hi, std::vector<ByteRangeSequence>* out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t(1) << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_length(lo, lo | m, out);
        split_same_length((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_length(lo, (hi & ~m) - 1, out);
        split_same_length(hi & ~m, hi, out);
        return;
      }
    }
  }
  const auto a = encode(lo), b = encode(hi);
  ByteRangeSequence seq;
  for (size_t k = 0; k < a.size(); ++k) seq.push_back({a[k], b[k]});
  out->push_back(std::move(seq));
}

}  // namespace

bool decode_utf8(std::string_view s, size_t* pos, uint32_t* cp) {
  if (*pos >= s.size()) return false;
  const uint8_t c = uint8_t(s[*pos]);
  const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || *pos + len > s.size()) return false;
  uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t i = 1; i < len; ++i) {
    const uint8_t cc = uint8_t(s[*pos + i]);
    if ((cc & 0xC0) != 0x80) return false;
    v = (v << 6) | (cc & 0x3F);
  }
  static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMinForLength[len] || v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *pos += len;
  *cp = v;
  return true;
}

void append_utf8(uint32_t cp, std::vector<uint8_t>* out) {
  if (cp < 0x80) {
    out->push_back(uint8_t(cp));
  } else if (cp < 0x800) {
    out->push_back(uint8_t(0xC0 | (cp >> 6)));
    out->push_back(uint8_t(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(uint8_t(0xE0 | (cp >> 12)));
    out->push_back(uint8_t(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(uint8_t(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(uint8_t(0xF0 | (cp >> 18)));
    out->push_back(uint8_t(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(uint8_t(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(uint8_t(0x80 | (cp & 0x3F)));
  }
}

std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negate) {
  for (auto& r : ranges) r.second = std::min(r.second, kMaxCodepoint);
  std::erase_if(ranges, [](const CodepointRange& r) { return r.first > r.second; });
  std::sort(ranges.begin(), ranges.end());
  std::vector<CodepointRange> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  if (!negate) return merged;
  std::vector<CodepointRange> complement;
  uint32_t next = 0;
  for (const auto& r : merged) {
    if (r.first > next) complement.push_back({next, r.first - 1});
    next = r.second + 1;
  }
  if (next <= kMaxCodepoint) complement.push_back({next, kMaxCodepoint});
  return complement;
}

std::vector<ByteRangeSequence> utf8_sequences(const std::vector<CodepointRange>& ranges) {
  // Pieces that never straddle an encoding-length boundary or the surrogate block.
  static constexpr CodepointRange kBlocks[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, kMaxCodepoint}};
  std::vector<ByteRangeSequence> out;
  for (const auto& r : ranges) {
    for (const auto& blk : kBlocks) {
      const uint32_t lo = std::max(r.first, blk.first), hi = std::min(r.second, blk.second);
      if (lo <= hi) split_same_length(lo, hi, &out);
    }
  }
  return out;
}

}  // namespace hearth
