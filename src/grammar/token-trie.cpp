// token-trie.h. Built from the tokens sorted by their bytes: each node's range of the sorted
// list splits into one contiguous run per next byte, so nodes are laid out breadth-first with
// every node's children next to each other.
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
  struct Pending {
    uint32_t node;
    size_t begin, end, depth;  // tokens order[begin, end) share the node's depth-byte prefix
  };
  nodes_.push_back({});
  std::vector<Pending> queue = {{0, 0, order.size(), 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Pending p = queue[q];
    size_t i = p.begin;
    // Tokens exactly `depth` bytes long sort first in the range and end at this node.
    nodes_[p.node].first_token = uint32_t(token_ids_.size());
    while (i < p.end && token_bytes[size_t(order[i])].size() == p.depth)
      token_ids_.push_back(order[i++]);
    nodes_[p.node].n_tokens = uint32_t(token_ids_.size()) - nodes_[p.node].first_token;
    nodes_[p.node].first_child = uint32_t(nodes_.size());
    while (i < p.end) {
      const uint8_t b = uint8_t(token_bytes[size_t(order[i])][p.depth]);
      size_t j = i;
      while (j < p.end && uint8_t(token_bytes[size_t(order[j])][p.depth]) == b) ++j;
      Node child;
      child.byte = b;
      queue.push_back({uint32_t(nodes_.size()), i, j, p.depth + 1});
      nodes_.push_back(child);
      ++nodes_[p.node].n_children;
      i = j;
    }
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
