// A grammar constraint on one sequence's generated tokens (grammar/*.h): which tokens may come
// next, applied to the logits before the sampler chain, and advanced with every accepted token.
//
// The mask of a state is computed once by one scan of the vocabulary trie (grammar/token_trie.h)
// with the matcher, plus the token elements on top of its stacks (special tokens, which are not in
// the trie), then cached under the state (its sorted stack ids), so a state met again costs a hash
// lookup and the masking pass. End-of-generation tokens are allowed exactly when the grammar may
// end; after one is accepted only end-of-generation tokens are.
//
// Tool calls use the grammar lazily (set_trigger, as llama.cpp's lazy grammars): outside a call
// the output is free, the trigger token (Gemma 4's <|tool_call>) starts the grammar, and once the
// grammar is complete (the call closed) the output is free again until the next trigger.
//
// The engine (generate/engine.cpp) masks in choose() and in accept_verify() (a drafted token the
// grammar rejects has logit -inf, so it is rejected and the constrained token replaces it), and
// accepts each emitted token. Engine::keep() rolls back the tokens it drops; Engine::start() resets.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "generate/grammar/matcher.h"
#include "generate/grammar/token_trie.h"

namespace gem4::text {
class Tokenizer;
}

namespace gem4::generate {

struct ConstraintStats {
  int64_t masks_computed = 0;  // trie scans
  int64_t mask_hits = 0;       // masks found in the cache
  double compute_s = 0;        // time in trie scans
};

class GrammarConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const grammar::Grammar> grammar,
                    std::shared_ptr<const grammar::TokenTrie> vocab);

  // Reasoning stays free: with thinking on, the first token may instead open a thought block
  // (Gemma 4's `<|channel>thought ... <channel|>`, tokens `open` and `close`); inside it every token
  // but end of generation is allowed, and the grammar applies from the token after `close`.
  void allow_thinking(int32_t open, int32_t close);
  // Lazy use of the grammar (see the header). The grammar describes what follows `token`.
  struct Trigger {
    int32_t token = -1;
    // false (tool_choice auto): the answer is free until the trigger, and free again after each
    // complete grammar. true (required, or a named function): the answer is calls only: it starts
    // with the trigger, and after each complete grammar only another trigger or the end may follow.
    bool required = false;
    // Bytes of the grammar the prompt already wrote after the trigger (a call the prompt opened,
    // "call:NAME{"): the answer starts inside the grammar, after them (and cannot think first).
    std::string opened;
  };
  // Throws std::invalid_argument for a token outside the vocabulary or `opened` the grammar rejects.
  void set_trigger(Trigger trigger);
  // Back to the grammar's start (the cache of masks is kept).
  void reset();
  // The tokens allowed now: bit t of word t / 64. Valid until the next call that changes the state.
  const std::vector<uint64_t>& mask();
  bool allows(int32_t token);
  // `logits` (n_vocab values) with the tokens not allowed set to -infinity, in a buffer of the
  // constraint's own (valid until the next apply()).
  const float* apply(const float* logits, int n_vocab);
  // Advances by an allowed token; throws std::logic_error naming the token otherwise.
  void accept(int32_t token);
  // Forgets the last n accepted tokens (at most those accepted since reset()).
  void rollback(int n);
  int accepted() const { return int(history_.size()) - 1; }
  // The grammar may end here (an end-of-generation token is allowed).
  bool can_end() const;
  // Nothing but end of generation may follow (the grammar is complete, or an EOG was accepted).
  bool done() const;

  const ConstraintStats& stats() const { return stats_; }
  const grammar::TokenTrie& vocab() const { return *vocab_; }

 private:
  // kMayThink: nothing generated yet, a thought block may open; kThinking: inside it; kAnswer: the
  // grammar runs. With a trigger: kFree: any token; kNeedCall: only the trigger; kCallOrEnd: the
  // trigger or end of generation.
  enum class Phase : uint8_t { kAnswer, kMayThink, kThinking, kFree, kNeedCall, kCallOrEnd };
  struct State {
    grammar::StackSet stacks;
    bool ended = false;  // an end-of-generation token was accepted
    Phase phase = Phase::kAnswer;
  };
  struct Hash {
    size_t operator()(const grammar::StackSet& s) const;
  };
  void compute(const grammar::StackSet& s, std::vector<uint64_t>& bits);
  // The state the answer starts in (after the thought block, if any).
  State answer_start() const;
  const std::vector<uint64_t>& answer_mask(const State& st);
  static bool state_can_end(const State& s);
  std::vector<uint64_t> single(std::initializer_list<int32_t> tokens) const;

  std::shared_ptr<const grammar::TokenTrie> vocab_;
  grammar::Matcher matcher_;
  std::vector<State> history_;  // [0]: the start; back(): now
  std::unordered_map<grammar::StackSet, std::vector<uint64_t>, Hash> cache_;
  size_t cache_limit_;                              // entries
  const std::vector<uint64_t>* current_ = nullptr;  // mask of history_.back(), when known
  std::vector<uint64_t> eog_only_;
  int32_t think_open_ = -1, think_close_ = -1;  // allow_thinking's tokens (-1: thinking off)
  std::vector<uint64_t> thinking_;              // every token but end of generation
  Trigger trigger_;                             // token -1: the grammar applies to the whole answer
  grammar::StackSet opened_;                    // the state after trigger_.opened
  std::vector<uint64_t> all_, trigger_only_, trigger_or_eog_;
  bool has_tokens_ = false;  // the grammar has token elements (accept() also tries them)
  std::vector<int32_t> top_tokens_;
  std::vector<uint64_t> may_think_;       // the start state's mask plus think_open_ (built on first use)
  std::vector<grammar::StackSet> level_;  // per trie depth, during a scan
  std::vector<float> masked_;
  ConstraintStats stats_;
};

// Thinking on: c.allow_thinking with the vocabulary's Gemma 4 thought-block tokens (<|channel>,
// <channel|>); a vocabulary without them leaves the constraint as it is.
void allow_gemma_thinking(GrammarConstraint& c, const text::Tokenizer& tok);

}  // namespace gem4::generate
