// The vocabulary as a trie of token byte strings, for computing which tokens a grammar state allows.
//
// Nodes are stored in preorder with the index just past each node's subtree, so a mask is one
// forward scan: a node whose byte the state rejects skips its whole subtree (every token starting
// with that prefix) in one jump. Tokens that stand for text (normal and byte tokens) are in the trie;
// end-of-generation tokens are kept apart (allowed exactly when the grammar may end); every other
// token (control, unused, user-defined markers, empty pieces) is never allowed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gem4::text {
class Tokenizer;
}

namespace gem4::generate::grammar {

class TokenTrie {
 public:
  struct Node {
    uint8_t byte;
    uint16_t depth;     // 1 for a first byte
    int32_t end;        // preorder index just past this node's subtree
    int32_t tok_begin;  // tokens whose bytes end here: ids_[tok_begin, tok_end)
    int32_t tok_end;
  };

  // tokens[i] = the bytes of token i, or nullopt-like empty for a token outside the trie.
  TokenTrie(int n_vocab, const std::vector<std::string>& token_bytes, std::vector<int32_t> eog_ids);
  // From a tokenizer: pieces without special text, only normal and byte tokens.
  static std::shared_ptr<const TokenTrie> from_tokenizer(const text::Tokenizer& tok);
  // The same, built once per vocabulary and shared (the server's requests; thread-safe).
  static std::shared_ptr<const TokenTrie> shared_for(const text::Tokenizer& tok);

  int n_vocab() const { return n_vocab_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const int32_t* ids() const { return ids_.data(); }
  const std::vector<int32_t>& eog_ids() const { return eog_; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool is_eog(int32_t id) const;
  int max_depth() const { return max_depth_; }

 private:
  int n_vocab_;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  std::vector<std::string> bytes_;  // per token ("" outside the trie)
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_;
  int max_depth_ = 0;
};

}  // namespace gem4::generate::grammar
