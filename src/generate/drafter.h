// What a speculative drafter sees and returns. A drafter proposes up to n_max tokens that continue
// the sequence; the target then checks them all in one batch (generate/speculative.h).
//
// The sequence at drafting time: tokens[0 .. n-2] are in the target's KV cache; tokens[n-1] (`last`)
// was just sampled and is not in the cache yet; it sits at position n-1. `hidden` is the target's
// post-final-norm hidden state of the row at position n-2, the row whose logits produced `last`.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "generate/sampler.h"
#include "model/kv_cache.h"

namespace gem4::generate {

struct DraftRequest {
  const std::vector<int32_t>* tokens = nullptr;  // the whole sequence, `last` included
  const float* hidden = nullptr;                 // may be null (nothing verified yet)
  const KvCache* target_kv = nullptr;
  int seq = 0;                                   // the sequence of the target cache
  int n_max = 0;                                 // propose at most this many tokens
  float temperature = 0;                         // <= 0: greedy drafts (every q is a point mass)
  std::mt19937_64* rng = nullptr;                // for sampled drafts

  int32_t last() const { return tokens->back(); }
  int last_pos() const { return int(tokens->size()) - 1; }
};

struct Draft {
  std::vector<int32_t> tokens;
  // q[i]: the distribution tokens[i] was drawn from (sums to 1). Empty (or missing): a point mass on
  // tokens[i], the case of greedy and deterministic (n-gram) proposals.
  std::vector<std::vector<TokenProb>> q;
  const char* source = "";  // which drafter made it (for statistics)
  int match = 0;            // n-gram drafts: the length of the context match
  void clear() {
    tokens.clear();
    q.clear();
    source = "";
    match = 0;
  }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // Whether draft() reads DraftRequest::hidden (the target then returns hidden states of output rows).
  virtual bool needs_hidden() const { return false; }
  // Fills `out` with 0..n_max tokens (cleared first by the caller).
  virtual void draft(const DraftRequest& req, Draft& out) = 0;
  // Forget per-sequence state (a new conversation).
  virtual void reset() {}
};

// Helpers for drafters that draw from their own logits.
// The proposal distribution: softmax(logits / temperature) over the top_k largest logits,
// renormalised; sorted by descending probability. -infinity logits never appear.
std::vector<TokenProb> proposal_distribution(const float* logits, int n_vocab, float temperature, int top_k);
// Argmax over the finite logits, lowest id on ties (the same rule as greedy sampling); 0 when none is finite.
int32_t argmax_token(const float* logits, int n_vocab);
// Draws from a distribution that sums to 1.
int32_t draw(const std::vector<TokenProb>& dist, std::mt19937_64& rng);

}  // namespace gem4::generate
