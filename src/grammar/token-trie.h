// The vocabulary as a byte trie (token id -> the bytes it adds to the output), built once per
// tokenizer and shared by every constraint on it. A mask walks it against the grammar, so a
// prefix the grammar rejects prunes every token that starts with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hearth {

class Tokenizer;

class TokenTrie {
 public:
  // Nodes are in depth-first preorder: a node's subtree is nodes [index, end), its first child
  // (if any) is index + 1 and each child's next sibling is that child's end. A walk then reads
  // the array nearly in order, and a subtree's tokens are contiguous in token_ids().
  struct Node {
    uint32_t end = 0;                        // one past the last node of this subtree
    uint32_t first_token = 0, n_tokens = 0;  // tokens whose bytes end here, in token_ids()
    uint8_t byte = 0;                        // the edge from the parent
  };

  // token_bytes[id] is token id's output; empty ones (control tokens) are left out.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  const std::vector<Node>& nodes() const { return nodes_; }  // nodes()[0] is the root
  const std::vector<int32_t>& token_ids() const { return token_ids_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
};

// What a grammar constraint needs to know about a vocabulary: each token's bytes, which ids end
// generation, and the trie. Immutable; share one per tokenizer.
struct TokenVocabulary {
  int32_t n_vocab = 0;
  std::vector<std::string> bytes;
  std::vector<uint8_t> ends_generation;  // EOS, EOT, ...: allowed only where the grammar ends
  std::vector<int32_t> end_ids;          // the ids with ends_generation set
  TokenTrie trie;

  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<uint8_t> end_flags);
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tok);
};

}  // namespace hearth
