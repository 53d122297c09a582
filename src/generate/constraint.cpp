#include "generate/constraint.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "text/tokenizer.h"

namespace gem4::generate {

size_t GrammarConstraint::Hash::operator()(const grammar::StackSet& s) const {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
  for (int32_t x : s) {
    h ^= uint64_t(uint32_t(x)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return size_t(h);
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const grammar::Grammar> grammar,
                                     std::shared_ptr<const grammar::TokenTrie> vocab)
    : vocab_(std::move(vocab)), matcher_(std::move(grammar)) {
  const size_t words = (size_t(vocab_->n_vocab()) + 63) / 64;
  // 64 MiB of masks at most: 2048 states of a 262,144-token vocabulary.
  cache_limit_ = std::max<size_t>(64, (size_t(64) << 20) / (words * 8));
  eog_only_.assign(words, 0);
  for (int32_t e : vocab_->eog_ids())
    if (e >= 0 && e < vocab_->n_vocab()) eog_only_[e / 64] |= uint64_t(1) << (e % 64);
  level_.resize(size_t(vocab_->max_depth()) + 1);
  reset();
}

void GrammarConstraint::allow_thinking(int32_t open, int32_t close) {
  if (open < 0 || open >= vocab_->n_vocab() || close < 0 || close >= vocab_->n_vocab() || open == close)
    throw std::invalid_argument("grammar constraint: bad thought-block tokens " + std::to_string(open) +
                                ", " + std::to_string(close));
  think_open_ = open;
  think_close_ = close;
  thinking_.assign(eog_only_.size(), ~uint64_t(0));
  for (size_t w = 0; w < thinking_.size(); ++w) thinking_[w] &= ~eog_only_[w];
  const int tail = vocab_->n_vocab() % 64;
  if (tail) thinking_.back() &= (uint64_t(1) << tail) - 1;
  may_think_.clear();
  reset();
}

void GrammarConstraint::reset() {
  history_.clear();
  history_.push_back({matcher_.initial(), false, think_open_ >= 0 ? Phase::kMayThink : Phase::kAnswer});
  current_ = nullptr;
}

bool GrammarConstraint::can_end() const {
  const State& s = history_.back();
  if (s.phase == Phase::kThinking) return false;
  return s.ended || grammar::Matcher::can_end(s.stacks);
}

bool GrammarConstraint::done() const {
  const State& s = history_.back();
  if (s.phase != Phase::kAnswer) return false;
  return s.ended || (s.stacks.size() == 1 && s.stacks[0] == grammar::kEmptyStack);
}

// One preorder scan of the trie: level_[d] holds the state after the first d bytes of the current
// path; a node the state rejects skips its subtree.
void GrammarConstraint::compute(const grammar::StackSet& s, std::vector<uint64_t>& bits) {
  const auto t0 = std::chrono::steady_clock::now();
  bits.assign((size_t(vocab_->n_vocab()) + 63) / 64, 0);
  const auto& nodes = vocab_->nodes();
  const int32_t* ids = vocab_->ids();
  level_[0] = s;
  const int32_t n = int32_t(nodes.size());
  for (int32_t i = 0; i < n;) {
    const auto& node = nodes[i];
    grammar::StackSet& out = level_[node.depth];
    matcher_.advance(level_[node.depth - 1], node.byte, out);
    if (out.empty()) {
      i = node.end;
      continue;
    }
    for (int32_t k = node.tok_begin; k < node.tok_end; ++k) bits[ids[k] / 64] |= uint64_t(1) << (ids[k] % 64);
    ++i;
  }
  if (grammar::Matcher::can_end(s))
    for (size_t w = 0; w < bits.size(); ++w) bits[w] |= eog_only_[w];
  stats_.masks_computed++;
  stats_.compute_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const std::vector<uint64_t>& GrammarConstraint::mask() {
  if (current_) return *current_;
  const State& st = history_.back();
  if (st.ended) return *(current_ = &eog_only_);
  if (st.phase == Phase::kThinking) return *(current_ = &thinking_);
  if (st.phase == Phase::kMayThink) {
    if (may_think_.empty()) {
      compute(st.stacks, may_think_);
      may_think_[think_open_ / 64] |= uint64_t(1) << (think_open_ % 64);
    }
    return *(current_ = &may_think_);
  }
  auto it = cache_.find(st.stacks);
  if (it != cache_.end()) {
    stats_.mask_hits++;
    return *(current_ = &it->second);
  }
  if (cache_.size() >= cache_limit_) cache_.clear();
  std::vector<uint64_t> bits;
  compute(st.stacks, bits);
  return *(current_ = &cache_.emplace(st.stacks, std::move(bits)).first->second);
}

bool GrammarConstraint::allows(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  return (mask()[token / 64] >> (token % 64)) & 1;
}

const float* GrammarConstraint::apply(const float* logits, int n_vocab) {
  if (n_vocab != vocab_->n_vocab())
    throw std::invalid_argument("grammar constraint: the model has " + std::to_string(n_vocab) +
                                " tokens but the vocabulary " + std::to_string(vocab_->n_vocab()));
  const std::vector<uint64_t>& m = mask();
  masked_.resize(n_vocab);
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  float* out = masked_.data();
  for (int b = 0; b < n_vocab; b += 64) {
    const int n = std::min(64, n_vocab - b);
    const uint64_t w = m[b / 64];
    if (w == ~uint64_t(0)) {
      std::memcpy(out + b, logits + b, sizeof(float) * n);
    } else if (w == 0) {
      std::fill(out + b, out + b + n, kNeg);
    } else {
      for (int j = 0; j < n; ++j) out[b + j] = (w >> j) & 1 ? logits[b + j] : kNeg;
    }
  }
  return out;
}

void GrammarConstraint::accept(int32_t token) {
  if (!allows(token))
    throw std::logic_error("grammar constraint: token " + std::to_string(token) + " is not allowed here");
  State next;
  const Phase phase = history_.back().phase;
  if (phase == Phase::kMayThink && token == think_open_) {
    next = {matcher_.initial(), false, Phase::kThinking};
  } else if (phase == Phase::kThinking) {
    next = {matcher_.initial(), false, token == think_close_ ? Phase::kAnswer : Phase::kThinking};
  } else if (vocab_->is_eog(token) || history_.back().ended) {
    next.ended = true;
  } else {
    next.stacks = history_.back().stacks;
    const std::string& b = vocab_->bytes(token);
    matcher_.feed(next.stacks, reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }
  history_.push_back(std::move(next));
  current_ = nullptr;
}

void GrammarConstraint::rollback(int n) {
  n = std::clamp(n, 0, accepted());
  history_.resize(history_.size() - n);
  current_ = nullptr;
}

void allow_gemma_thinking(GrammarConstraint& c, const text::Tokenizer& tok) {
  const auto open = tok.find_token("<|channel>"), close = tok.find_token("<channel|>");
  if (open && close) c.allow_thinking(*open, *close);
}

}  // namespace gem4::generate
