// StopStringFilter: a held-back tail no longer than the longest stop string minus one.
#include "runtime/stop-strings.h"

#include <algorithm>

namespace hearth {

size_t partial_match_suffix(std::string_view text, std::string_view pattern) {
  if (pattern.empty()) return 0;
  for (size_t len = std::min(pattern.size() - 1, text.size()); len > 0; --len)
    if (text.substr(text.size() - len) == pattern.substr(0, len)) return len;
  return 0;
}

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStringFilter::push(const std::string& text) {
  if (matched_) return "";
  held_ += text;
  if (stops_.empty()) {
    std::string out;
    out.swap(held_);
    return out;
  }
  // The stop that completes first cuts (of two completing together, the longer): where text
  // arrives byte by byte that is the only one seen, so any split into pieces cuts the same. (The
  // earliest start would not: with stops "abcd" and "bc", pieces "ab", "c" end at "bc", while
  // "abcd" in one piece would cut before "a".)
  size_t cut = std::string::npos, cut_end = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    const size_t end = at + s.size();
    if (end < cut_end || (end == cut_end && at < cut)) cut = at, cut_end = end;
  }
  if (cut != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Keep the longest suffix of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) keep = std::max(keep, partial_match_suffix(held_, s));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringFilter::flush(const std::string& text) {
  std::string out = push(text);
  if (matched_) return out;
  out += held_;
  held_.clear();
  return out;
}

}  // namespace hearth
