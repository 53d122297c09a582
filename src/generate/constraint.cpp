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
  // Token elements must name tokens of this vocabulary that do not end generation (the grammar's
  // own end allows those).
  for (const grammar::Element& e : matcher_.grammar().elements) {
    if (e.kind != grammar::Element::Token) continue;
    if (e.value < 0 || e.value >= vocab_->n_vocab())
      throw grammar::GrammarError("grammar token " + std::to_string(e.value) +
                                  " is outside the vocabulary (0.." + std::to_string(vocab_->n_vocab() - 1) +
                                  ")");
    if (vocab_->is_eog(e.value))
      throw grammar::GrammarError("grammar token " + std::to_string(e.value) +
                                  " ends generation; the end of the grammar allows it already");
    has_tokens_ = true;
  }
  all_.assign(words, ~uint64_t(0));
  if (const int tail = vocab_->n_vocab() % 64) all_.back() = (uint64_t(1) << tail) - 1;
  reset();
}

std::vector<uint64_t> GrammarConstraint::single(std::initializer_list<int32_t> tokens) const {
  std::vector<uint64_t> bits(eog_only_.size(), 0);
  for (int32_t t : tokens) bits[t / 64] |= uint64_t(1) << (t % 64);
  return bits;
}

void GrammarConstraint::set_trigger(Trigger trigger) {
  if (trigger.token < 0 || trigger.token >= vocab_->n_vocab() || vocab_->is_eog(trigger.token))
    throw std::invalid_argument("grammar constraint: bad trigger token " + std::to_string(trigger.token));
  grammar::StackSet opened = matcher_.initial();
  if (!trigger.opened.empty() &&
      !matcher_.feed(opened, reinterpret_cast<const uint8_t*>(trigger.opened.data()), trigger.opened.size()))
    throw std::invalid_argument("grammar constraint: the grammar does not accept the opened call '" +
                                trigger.opened + "'");
  opened_ = std::move(opened);
  trigger_ = std::move(trigger);
  trigger_only_ = single({trigger_.token});
  trigger_or_eog_ = trigger_only_;
  for (size_t w = 0; w < trigger_or_eog_.size(); ++w) trigger_or_eog_[w] |= eog_only_[w];
  may_think_.clear();
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

GrammarConstraint::State GrammarConstraint::answer_start() const {
  if (trigger_.token < 0) return {matcher_.initial(), false, Phase::kAnswer};
  if (!trigger_.opened.empty()) return {opened_, false, Phase::kAnswer};
  return {{}, false, trigger_.required ? Phase::kNeedCall : Phase::kFree};
}

void GrammarConstraint::reset() {
  history_.clear();
  // A call the prompt opened leaves no room for a thought block first.
  if (think_open_ >= 0 && trigger_.opened.empty())
    history_.push_back({matcher_.initial(), false, Phase::kMayThink});
  else
    history_.push_back(answer_start());
  current_ = nullptr;
}

bool GrammarConstraint::state_can_end(const State& s) {
  if (s.ended) return true;
  switch (s.phase) {
    case Phase::kThinking:
    case Phase::kNeedCall:
      return false;
    case Phase::kFree:
    case Phase::kCallOrEnd:
      return true;
    default:
      return grammar::Matcher::can_end(s.stacks);
  }
}

bool GrammarConstraint::can_end() const {
  const State& s = history_.back();
  return state_can_end(s.phase == Phase::kMayThink ? answer_start() : s);
}

bool GrammarConstraint::done() const {
  const State& s = history_.back();
  if (s.ended) return true;
  if (s.phase != Phase::kAnswer) return false;
  return s.stacks.size() == 1 && s.stacks[0] == grammar::kEmptyStack;
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
  if (has_tokens_) {
    top_tokens_.clear();
    matcher_.top_tokens(s, top_tokens_);
    for (int32_t t : top_tokens_) bits[t / 64] |= uint64_t(1) << (t % 64);
  }
  if (grammar::Matcher::can_end(s))
    for (size_t w = 0; w < bits.size(); ++w) bits[w] |= eog_only_[w];
  stats_.masks_computed++;
  stats_.compute_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const std::vector<uint64_t>& GrammarConstraint::mask() {
  if (current_) return *current_;
  const State& st = history_.back();
  if (st.phase == Phase::kMayThink) {
    if (may_think_.empty()) {
      may_think_ = answer_mask(answer_start());
      may_think_[think_open_ / 64] |= uint64_t(1) << (think_open_ % 64);
    }
    return *(current_ = &may_think_);
  }
  return *(current_ = &answer_mask(st));
}

const std::vector<uint64_t>& GrammarConstraint::answer_mask(const State& st) {
  if (st.ended) return eog_only_;
  switch (st.phase) {
    case Phase::kThinking:
      return thinking_;
    case Phase::kFree:
      return all_;
    case Phase::kNeedCall:
      return trigger_only_;
    case Phase::kCallOrEnd:
      return trigger_or_eog_;
    default:
      break;
  }
  auto it = cache_.find(st.stacks);
  if (it != cache_.end()) {
    stats_.mask_hits++;
    return it->second;
  }
  if (cache_.size() >= cache_limit_) cache_.clear();
  std::vector<uint64_t> bits;
  compute(st.stacks, bits);
  return cache_.emplace(st.stacks, std::move(bits)).first->second;
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
  const State* cur = &history_.back();
  State start;
  if (cur->phase == Phase::kMayThink) {
    if (token == think_open_) {
      history_.push_back({{}, false, Phase::kThinking});
      current_ = nullptr;
      return;
    }
    start = answer_start();  // no thought block: the token is the answer's first
    cur = &start;
  }
  if (cur->phase == Phase::kThinking) {
    next = token == think_close_ ? answer_start() : State{{}, false, Phase::kThinking};
  } else if (vocab_->is_eog(token) || cur->ended) {
    next.ended = true;
  } else if (cur->phase == Phase::kFree || cur->phase == Phase::kNeedCall ||
             cur->phase == Phase::kCallOrEnd) {
    next = token == trigger_.token ? State{matcher_.initial(), false, Phase::kAnswer} : *cur;
  } else {
    // Through the token's bytes, or as a whole token for a token element; a special token has no
    // bytes in the trie, so it can only be the latter.
    const std::string& b = vocab_->bytes(token);
    if (!b.empty()) {
      next.stacks = cur->stacks;
      if (!matcher_.feed(next.stacks, reinterpret_cast<const uint8_t*>(b.data()), b.size()))
        next.stacks.clear();
    }
    if (has_tokens_) {
      grammar::StackSet by_token;
      matcher_.advance_token(cur->stacks, token, by_token);
      if (next.stacks.empty()) {
        next.stacks.swap(by_token);
      } else if (!by_token.empty()) {
        next.stacks.insert(next.stacks.end(), by_token.begin(), by_token.end());
        std::sort(next.stacks.begin(), next.stacks.end());
        next.stacks.erase(std::unique(next.stacks.begin(), next.stacks.end()), next.stacks.end());
      }
    }
    // A complete call hands back to the text around calls.
    if (trigger_.token >= 0 && next.stacks.size() == 1 && next.stacks[0] == grammar::kEmptyStack)
      next = {{}, false, trigger_.required ? Phase::kCallOrEnd : Phase::kFree};
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
