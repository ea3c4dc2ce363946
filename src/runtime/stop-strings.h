// Stop strings over streamed text: emits text as soon as it cannot be the start of a stop string,
// holds back a possible partial match, and cuts the output where the first stop string to
// complete begins (of two completing at once, the longer), so the output is the same however the
// text was split into pieces (tokens, stream chunks).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hearth {

// The length of the longest suffix of `text` that is a proper prefix of `pattern`: how much of a
// stream's tail must be held back because `pattern` may be starting there.
size_t partial_match_suffix(std::string_view text, std::string_view pattern);

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  // Feeds new text; returns what can be shown now.
  std::string push(const std::string& text);
  // End of stream: returns whatever is still held back (nothing once a stop matched).
  std::string flush(const std::string& text = "");
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace hearth
