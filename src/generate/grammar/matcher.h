// A stack matcher over a Grammar's bytes, in llama.cpp's style: the parser state is a set of
// stacks, each the rest of one parse (its top is a byte or token element; an empty stack means the
// input may end here). Feeding a byte keeps the stacks whose top is a byte element accepting it,
// pops them, and expands the continuation down to terminals again; feeding a token id does the same
// for the stacks whose top is that token's element.
//
// Stacks are hash-consed: a frame (element position, parent frame) is interned once, so one frame
// id names one whole stack, equal stacks share an id, and a parser state is a sorted vector of ids
// (StackSet), cheap to compare, hash and keep for rollback. Interned frames live as long as the
// matcher (bounded by the grammar's structure times the nesting depth reached).
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "generate/grammar/grammar.h"

namespace gem4::generate::grammar {

using StackSet = std::vector<int32_t>;  // sorted unique frame ids; kEmptyStack: the input may end
constexpr int32_t kEmptyStack = -1;

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  const Grammar& grammar() const { return *g_; }
  // The state before any input.
  const StackSet& initial() const { return initial_; }
  // The state after `byte` (empty: the byte is not allowed). `out` must not alias `in`.
  void advance(const StackSet& in, uint8_t byte, StackSet& out);
  // Feeds a string of bytes; false (and `state` unchanged) if some byte is not allowed.
  bool feed(StackSet& state, const uint8_t* bytes, size_t n);
  // The state after the whole token `token` matched by a token element (empty: none on top wants it).
  void advance_token(const StackSet& in, int32_t token, StackSet& out);
  bool feed_token(StackSet& state, int32_t token);  // false (and `state` unchanged) if not allowed
  // Appends the ids of the token elements on top of `s` (the tokens it allows as whole tokens).
  void top_tokens(const StackSet& s, std::vector<int32_t>& out) const;
  static bool can_end(const StackSet& s) { return !s.empty() && s.front() == kEmptyStack; }
  // Whether `text` as a whole is in the language.
  bool matches(std::string_view text);

  size_t frames() const { return frames_.size(); }

 private:
  struct Frame {
    int32_t pos;     // element index (a Bytes or Token element for a top, any element for a continuation)
    int32_t parent;  // frame id, or -1 at the bottom
  };
  int32_t intern(int32_t pos, int32_t parent);
  void expand(int32_t pos, int32_t parent, StackSet& out, int depth);

  std::shared_ptr<const Grammar> g_;
  std::vector<Frame> frames_;
  std::vector<int32_t> table_;  // open addressing: frame id or -1
  StackSet initial_;
  StackSet scratch_;
};

}  // namespace gem4::generate::grammar
