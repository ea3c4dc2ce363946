// Special/added token matching by longest text at each position. Candidates are bucketed by
// first byte and kept longest-first, so the first hit is the longest.
#include "tokenizer/special-tokens.h"

#include <algorithm>

namespace hearth {

void SpecialTokenMatcher::add(std::string text, int32_t id) {
  if (text.empty()) return;
  const auto first = static_cast<uint8_t>(text[0]);
  entries_.push_back({std::move(text), id});
  auto& bucket = by_first_byte_[first];
  bucket.push_back(static_cast<uint32_t>(entries_.size() - 1));
  std::stable_sort(bucket.begin(), bucket.end(), [this](uint32_t a, uint32_t b) {
    return entries_[a].text.size() > entries_[b].text.size();
  });
}

std::pair<int32_t, size_t> SpecialTokenMatcher::match_at(std::string_view text, size_t pos) const {
  if (pos >= text.size()) return {-1, 0};
  for (uint32_t i : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
    const Entry& e = entries_[i];
    if (text.substr(pos).starts_with(e.text)) return {e.id, e.text.size()};
  }
  return {-1, 0};
}

std::vector<SpecialTokenMatcher::Fragment> SpecialTokenMatcher::split(std::string_view text) const {
  std::vector<Fragment> out;
  size_t start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    auto [id, len] = empty() ? std::pair<int32_t, size_t>{-1, 0} : match_at(text, pos);
    if (id < 0) {
      ++pos;
      continue;
    }
    if (pos > start) out.push_back({text.substr(start, pos - start), -1});
    out.push_back({text.substr(pos, len), id});
    pos += len;
    start = pos;
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
  return out;
}

}  // namespace hearth
