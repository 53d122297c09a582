#include "generate/grammar/token_trie.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

#include "text/tokenizer.h"

namespace gem4::generate::grammar {

TokenTrie::TokenTrie(int n_vocab, const std::vector<std::string>& token_bytes, std::vector<int32_t> eog_ids)
    : n_vocab_(n_vocab), bytes_(token_bytes), eog_(std::move(eog_ids)) {
  bytes_.resize(n_vocab);
  is_eog_.assign(n_vocab, 0);
  for (int32_t e : eog_)
    if (e >= 0 && e < n_vocab) is_eog_[e] = 1, bytes_[e].clear();
  // Sort the tokens by their bytes; shared prefixes of neighbours become shared trie nodes.
  std::vector<int32_t> order;
  for (int32_t i = 0; i < n_vocab; ++i)
    if (!bytes_[i].empty()) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b); });
  ids_ = order;
  // path[d] = node index at depth d + 1 on the current path.
  std::vector<int32_t> path;
  const std::string* prev = nullptr;
  for (size_t k = 0; k < order.size(); ++k) {
    const std::string& s = bytes_[order[k]];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    // Close the nodes deeper than the common prefix.
    while (path.size() > common) {
      nodes_[path.back()].end = int32_t(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(int32_t(nodes_.size()));
      nodes_.push_back({uint8_t(s[d]), uint16_t(std::min<size_t>(d + 1, 65535)), 0, int32_t(k), int32_t(k)});
    }
    Node& leaf = nodes_[path.back()];
    if (leaf.tok_end != int32_t(k)) leaf.tok_begin = int32_t(k);  // first token ending here
    leaf.tok_end = int32_t(k) + 1;
    max_depth_ = std::max<int>(max_depth_, int(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = int32_t(nodes_.size());
    path.pop_back();
  }
}

bool TokenTrie::is_eog(int32_t id) const { return id >= 0 && id < n_vocab_ && is_eog_[id]; }

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const text::Tokenizer& tok) {
  const int n = tok.n_vocab();
  std::vector<std::string> bytes(n);
  for (int32_t i = 0; i < n; ++i)
    if (tok.is_normal(i) || tok.is_byte(i)) bytes[i] = tok.token_piece(i, false);
  return std::make_shared<TokenTrie>(n, bytes, tok.eog_ids());
}

}  // namespace gem4::generate::grammar

namespace gem4::generate::grammar {

std::shared_ptr<const TokenTrie> TokenTrie::shared_for(const text::Tokenizer& tok) {
  static std::mutex mu;
  static std::map<const text::Vocab*, std::shared_ptr<const TokenTrie>> built;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = built[&tok.vocab()];
  // A vocabulary freed and another allocated at the same address must not get the old trie.
  bool same = slot && slot->n_vocab() == tok.n_vocab();
  for (int32_t i = 0; same && i < std::min(tok.n_vocab(), 256); ++i)
    same = slot->bytes(i) ==
           ((tok.is_normal(i) || tok.is_byte(i)) && !slot->is_eog(i) ? tok.token_piece(i, false) : "");
  if (!same) slot = from_tokenizer(tok);
  return slot;
}

}  // namespace gem4::generate::grammar
