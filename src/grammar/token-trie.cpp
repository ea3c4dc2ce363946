// token-trie.h. Built from the tokens sorted by their bytes: each node's range of the sorted
// list splits into one contiguous run per next byte, and the runs become its children.
#include "grammar/token-trie.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace hearth {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) {
  std::vector<int32_t> order;
  for (int32_t i = 0; i < int32_t(token_bytes.size()); ++i)
    if (!token_bytes[size_t(i)].empty()) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[size_t(a)] != token_bytes[size_t(b)]
               ? token_bytes[size_t(a)] < token_bytes[size_t(b)]
               : a < b;
  });
  // Preorder by an explicit stack (token lengths are unbounded): each entry is the node for
  // order[begin, end), whose tokens share their first `depth` bytes.
  struct Pending {
    uint32_t node;
    size_t begin, end, depth;
    bool opened;
  };
  nodes_.push_back({});
  std::vector<Pending> todo = {{0, 0, order.size(), 0, false}};
  while (!todo.empty()) {
    Pending& p = todo.back();
    if (p.opened) {  // every child is laid out: the subtree ends here
      nodes_[p.node].end = uint32_t(nodes_.size());
      todo.pop_back();
      continue;
    }
    if (p.node == UINT32_MAX) {  // a child is numbered when it is opened: preorder
      p.node = uint32_t(nodes_.size());
      Node n;
      n.byte = uint8_t(token_bytes[size_t(order[p.begin])][p.depth - 1]);
      nodes_.push_back(n);
    }
    p.opened = true;
    const Pending here = p;
    size_t i = here.begin;
    nodes_[here.node].first_token = uint32_t(token_ids_.size());
    while (i < here.end && token_bytes[size_t(order[i])].size() == here.depth)
      token_ids_.push_back(order[i++]);
    nodes_[here.node].n_tokens = uint32_t(token_ids_.size()) - nodes_[here.node].first_token;
    // Children are pushed in reverse so the stack opens them in byte order.
    std::vector<std::pair<size_t, size_t>> groups;
    while (i < here.end) {
      const uint8_t b = uint8_t(token_bytes[size_t(order[i])][here.depth]);
      size_t j = i;
      while (j < here.end && uint8_t(token_bytes[size_t(order[j])][here.depth]) == b) ++j;
      groups.push_back({i, j});
      i = j;
    }
    for (size_t g = groups.size(); g-- > 0;)
      todo.push_back({UINT32_MAX, groups[g].first, groups[g].second, here.depth + 1, false});
  }
}

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes,
                                 std::vector<uint8_t> end_flags)
    : n_vocab(int32_t(token_bytes.size())),
      bytes(std::move(token_bytes)),
      ends_generation(std::move(end_flags)),
      trie(bytes) {
  ends_generation.resize(bytes.size(), 0);
  for (size_t i = 0; i < ends_generation.size(); ++i)
    if (ends_generation[i]) end_ids.push_back(int32_t(i));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tok) {
  const int32_t n = tok.n_vocab();
  std::vector<std::string> bytes(size_t(std::max(n, 0)));
  std::vector<uint8_t> ends(bytes.size(), 0);
  for (int32_t i = 0; i < n; ++i) {
    ends[size_t(i)] = tok.is_end_of_generation(i);
    // An end-of-generation token adds nothing to the output even if it has a text form.
    if (!ends[size_t(i)]) bytes[size_t(i)] = tok.token_bytes(i);
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(ends));
}

}  // namespace hearth
