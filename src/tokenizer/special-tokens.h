// Finds special/added token texts inside input text (longest match wins at each position), so
// they become single ids before normalization or pre-tokenization. Shared by all tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

class SpecialTokenMatcher {
 public:
  void add(std::string text, int32_t id);  // empty texts are ignored
  bool empty() const { return entries_.empty(); }

  // Longest token text starting at text[pos]: its id and length, or {-1, 0}.
  std::pair<int32_t, size_t> match_at(std::string_view text, size_t pos) const;

  struct Fragment {
    std::string_view text;  // plain text when id < 0
    int32_t id = -1;
  };
  // Splits `text` into plain runs and matched tokens, in order.
  std::vector<Fragment> split(std::string_view text) const;

 private:
  struct Entry {
    std::string text;
    int32_t id;
  };
  std::vector<Entry> entries_;
  std::vector<std::vector<uint32_t>> by_first_byte_ = std::vector<std::vector<uint32_t>>(256);
};

}  // namespace hearth
