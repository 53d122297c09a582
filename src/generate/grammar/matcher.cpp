#include "generate/grammar/matcher.h"

#include <algorithm>
#include <string_view>

namespace gem4::generate::grammar {

namespace {
uint64_t mix(int32_t pos, int32_t parent) {
  uint64_t h = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

void sort_unique(StackSet& s) {
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
}
}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  table_.assign(1024, -1);
  if (g_->root < 0 || g_->root >= int(g_->rule_alts.size()))
    throw GrammarError("the grammar has no root rule");
  for (int32_t a : g_->rule_alts[g_->root]) expand(a, -1, initial_, 0);
  sort_unique(initial_);
}

int32_t Matcher::intern(int32_t pos, int32_t parent) {
  if (frames_.size() * 2 >= table_.size()) {
    std::vector<int32_t> t(table_.size() * 2, -1);
    const size_t mask = t.size() - 1;
    for (int32_t id = 0; id < int32_t(frames_.size()); ++id) {
      size_t i = mix(frames_[id].pos, frames_[id].parent) & mask;
      while (t[i] >= 0) i = (i + 1) & mask;
      t[i] = id;
    }
    table_.swap(t);
  }
  const size_t mask = table_.size() - 1;
  size_t i = mix(pos, parent) & mask;
  while (table_[i] >= 0) {
    const Frame& f = frames_[table_[i]];
    if (f.pos == pos && f.parent == parent) return table_[i];
    i = (i + 1) & mask;
  }
  const int32_t id = int32_t(frames_.size());
  frames_.push_back({pos, parent});
  table_[i] = id;
  return id;
}

// Expands the continuation at element `pos` (with `parent` below it) until every branch has a byte
// element on top or is empty. Terminates because no rule is left recursive.
void Matcher::expand(int32_t pos, int32_t parent, StackSet& out, int depth) {
  if (depth > 10000) throw GrammarError("grammar expansion too deep");
  for (;;) {
    const Element& e = g_->elements[pos];
    if (e.kind == Element::Bytes || e.kind == Element::Token) {
      out.push_back(intern(pos, parent));
      return;
    }
    if (e.kind == Element::Ref) {
      // The continuation after the reference; a reference at the end of its alternative continues
      // with the parent directly (so right recursion does not grow the stack).
      const int32_t cont = g_->elements[pos + 1].kind == Element::End ? parent : intern(pos + 1, parent);
      const auto& alts = g_->rule_alts[e.value];
      for (size_t k = 0; k + 1 < alts.size(); ++k) expand(alts[k], cont, out, depth + 1);
      pos = alts.back();
      parent = cont;
      continue;
    }
    // End of an alternative: pop.
    if (parent < 0) {
      out.push_back(kEmptyStack);
      return;
    }
    const Frame f = frames_[parent];
    pos = f.pos;
    parent = f.parent;
  }
}

void Matcher::advance(const StackSet& in, uint8_t byte, StackSet& out) {
  out.clear();
  for (int32_t id : in) {
    if (id == kEmptyStack) continue;
    const Frame f = frames_[id];
    const Element& e = g_->elements[f.pos];
    if (e.kind != Element::Bytes || !g_->byte_sets[e.value].test(byte)) continue;
    expand(f.pos + 1, f.parent, out, 0);
  }
  if (out.size() > 1) sort_unique(out);
}

void Matcher::advance_token(const StackSet& in, int32_t token, StackSet& out) {
  out.clear();
  for (int32_t id : in) {
    if (id == kEmptyStack) continue;
    const Frame f = frames_[id];
    const Element& e = g_->elements[f.pos];
    if (e.kind != Element::Token || e.value != token) continue;
    expand(f.pos + 1, f.parent, out, 0);
  }
  if (out.size() > 1) sort_unique(out);
}

bool Matcher::feed_token(StackSet& state, int32_t token) {
  advance_token(state, token, scratch_);
  if (scratch_.empty()) return false;
  state.swap(scratch_);
  return true;
}

void Matcher::top_tokens(const StackSet& s, std::vector<int32_t>& out) const {
  for (int32_t id : s) {
    if (id == kEmptyStack) continue;
    const Element& e = g_->elements[frames_[id].pos];
    if (e.kind == Element::Token) out.push_back(e.value);
  }
}

bool Matcher::feed(StackSet& state, const uint8_t* bytes, size_t n) {
  StackSet cur = state;
  for (size_t i = 0; i < n; ++i) {
    advance(cur, bytes[i], scratch_);
    if (scratch_.empty()) return false;
    cur.swap(scratch_);
  }
  state.swap(cur);
  return true;
}

bool Matcher::matches(std::string_view text) {
  StackSet s = initial_;
  return feed(s, reinterpret_cast<const uint8_t*>(text.data()), text.size()) && can_end(s);
}

}  // namespace gem4::generate::grammar
