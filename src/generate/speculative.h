// Speculative decoding: a drafter proposes tokens, the target checks them all in one batch.
//
// One round (llama.cpp's speculative loop, spec 5.2):
//   state: the sequence t[0..n-1]; t[0..n-2] are in the target's KV cache, `last` = t[n-1] is not.
//   1. draft d1..dk                                   (k from --draft-max, or the adaptive controller)
//   2. verify: the target runs [last, d1..dk] at positions n-1..n-1+k, logits on every row
//      (and the post-norm hidden state when the drafter needs it). Row i predicts the token after
//      row i, so row i checks d(i+1).
//   3. accept the longest prefix d1..da that passes, then one more token from row a: the correction
//      (a < k) or a bonus token (a = k). Emit d1..da and that token: 1..k+1 tokens per round.
//   4. roll back the target cache to positions < n + a (the rejected rows' K/V are forgotten;
//      the sliding rings keep window + max_ubatch cells, so this is free, see KvCache::can_truncate).
//   The new `last` is the emitted token; its hidden state for the next round is row a's.
//
// Acceptance rule.
//   Greedy (no sampler, or temperature <= 0): d(i+1) passes iff it is the target's choice on row i,
//     so the output is exactly plain greedy decoding's (up to float rounding of batched rows).
//   Sampling: p = the sampler chain's final distribution on row i (Sampler::distribution, after
//     penalties, top-k/top-p/min-p and temperature), q = the drafter's proposal distribution for
//     d(i+1) (a point mass for greedy/n-gram drafts). d passes with probability min(1, p(d)/q(d));
//     on rejection the token is drawn from norm(max(0, p - q)). If every draft passes, the bonus
//     token is drawn from p on row k. The emitted tokens are then distributed exactly as plain
//     sampling would give (Leviathan et al. 2023; Chen et al. 2023).
//   Every emitted token is passed to Sampler::accept (penalty history) before the next row's p is
//   computed; callers must not accept() them again.
//
// The round runs inside the engine's decoding step (generate/engine.h) for every sequence that has
// a drafter, batched with the other sequences' rows; without a drafter the same step drafts nothing
// and emits one token. This file holds the parts that are not the step:
// the draft length controller, the statistics and the acceptance rule.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "generate/drafter.h"
#include "generate/sampler.h"

namespace gem4::generate {

// --- draft length ---

struct SpecOptions {
  int draft_max = 3;      // --draft-max N: most tokens drafted per round
  bool adaptive = false;  // --draft-adaptive: tune the length in [0, draft_max] from measurements
  uint64_t seed = 0;      // the drafter's random generator (sampled drafts)
};

// Picks the draft length that maximises expected tokens per second: with a per-token acceptance
// probability a (estimated from accepted / (accepted + rejections), exponentially forgotten), k drafts
// yield E(k) = (1 - a^(k+1)) / (1 - a) tokens at a cost of k * draft_cost + verify_cost(k); both costs
// are measured (verify cost per batch size, unmeasured sizes extrapolated linearly). Every 16th round it
// tries one more token than the current best so that the cost of longer drafts keeps being measured.
class DraftLengthController {
 public:
  DraftLengthController(int draft_max, bool adaptive);
  int next();
  // A finished round: k drafted, a accepted, seconds spent drafting and verifying.
  void record(int k, int a, double draft_s, double verify_s);
  double acceptance_estimate() const;
  int draft_max() const { return max_; }

 private:
  double verify_cost(int k) const;
  int max_;
  bool adaptive_;
  int round_ = 0;
  double acc_ = 2.0, rej_ = 1.0;  // prior: a = 2/3
  double draft_cost_ = -1;        // seconds per drafted token (EMA)
  std::vector<double> verify_;    // seconds per verify batch of k+1 rows (EMA), < 0: unmeasured
};

// --- the decoder ---

struct SpecStats {
  int64_t rounds = 0;
  int64_t drafted = 0;
  int64_t accepted = 0;
  int64_t generated = 0;  // tokens emitted (start()'s first token included)
  int64_t draft_rounds = 0;  // rounds that drafted at least one token
  double prompt_s = 0;  // start(): prompt processing and the first token
  double draft_s = 0, verify_s = 0;
  double total_s = 0;   // start() and every round
  double acceptance_rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  // Accepted drafts per round that drafted.
  double mean_accepted() const { return draft_rounds ? double(accepted) / double(draft_rounds) : 0.0; }
  // Tokens emitted per round (1 for plain decoding).
  double tokens_per_round() const { return rounds ? double(generated - 1) / double(rounds) : 0.0; }
  double tokens_per_s() const { return total_s > 0 ? double(generated) / total_s : 0.0; }
  // Tokens emitted by rounds per second of rounds (prompt processing excluded): the number to set
  // beside a plain decode loop's tokens/s (`gem4 bench -n`).
  double decode_tokens_per_s() const {
    return total_s - prompt_s > 0 ? double(generated - 1) / (total_s - prompt_s) : 0.0;
  }
  std::string summary() const;  // one line for the CLI
};

// The acceptance step for one drafted token (exposed for tests). p: the target's distribution,
// q: the drafter's (empty: point mass on `draft`). Returns true if the draft is accepted; otherwise
// `*replacement` holds the token drawn from norm(max(0, p - q)). `u` is a uniform draw in [0, 1).
bool accept_or_resample(const std::vector<TokenProb>& p, const std::vector<TokenProb>& q, int32_t draft, double u,
                        Sampler& sampler, int32_t* replacement);

}  // namespace gem4::generate
