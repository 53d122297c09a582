#include "generate/session.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gem4 {

Session::Session(const Model& model, ThreadPool* pool, const SessionOptions& opt)
    : model_(model), kv_(model.config, opt.n_ctx, 1, opt.ubatch, opt.kv_type), forward_(model, pool) {
  forward_.ubatch = opt.ubatch;
  forward_.switches = opt.switches;
}

void Session::reset() {
  kv_.clear(0);
  tokens_.clear();
  logits_.clear();
  hidden_.clear();
}

void Session::truncate(int n) {
  n = std::clamp(n, 0, int(tokens_.size()));
  if (!kv_.can_truncate(0, n)) {
    // The sliding windows no longer hold what position n needs: recompute the kept prefix.
    std::vector<int32_t> keep(tokens_.begin(), tokens_.begin() + n);
    reset();
    if (!keep.empty()) append(keep);
    return;
  }
  kv_.truncate(0, n);
  tokens_.resize(n);
  logits_.clear();
  hidden_.clear();
}

int Session::set_tokens(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw std::invalid_argument("empty prompt");
  size_t common = 0;
  while (common < tokens.size() && common < tokens_.size() && tokens[common] == tokens_[common]) ++common;
  // The last token must be (re)computed to get its logits.
  if (common == tokens.size()) --common;
  truncate(int(common));
  return append(std::vector<int32_t>(tokens.begin() + tokens_.size(), tokens.end()));
}

int Session::append(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) return 0;
  const int start = int(tokens_.size());
  if (start + int(tokens.size()) > kv_.n_ctx())
    throw std::invalid_argument("the prompt needs " + std::to_string(start + tokens.size()) +
                                " tokens of context but the context holds " + std::to_string(kv_.n_ctx()));
  Batch b;
  b.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool last = i + 1 == tokens.size();
    b.push_back({tokens[i], int32_t(start + i), 0, last, last && want_hidden});
  }
  ForwardOutputs out;
  forward_.run(b, kv_, out);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  logits_.assign(out.logits.end() - out.n_vocab, out.logits.end());
  if (want_hidden && !out.hidden.empty()) hidden_.assign(out.hidden.end() - out.d_model, out.hidden.end());
  return int(tokens.size());
}

}  // namespace gem4
