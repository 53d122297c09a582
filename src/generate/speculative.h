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
// The target is driven through a Session: start() fills its KV cache with the prompt (reusing a
// cached prefix) and afterwards rounds append and roll back positions directly in session.kv().
// Session::tokens() is therefore not updated by rounds (tokens() here is the sequence); release()
// hands the session back consistent. generate_speculative() (speculative_generate.h) wraps all of
// this in generate()'s contract for the front ends.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "generate/drafter.h"
#include "generate/sampler.h"
#include "generate/session.h"
#include "model/forward.h"

namespace gem4::generate {

// --- drafters and command-line spec ---

// Tries its drafters in order and uses the first non-empty draft. The n-gram drafter placed first
// with min_n = 3 gives "n-gram when it has a long match, else the model drafter".
class CombinedDrafter : public Drafter {
 public:
  explicit CombinedDrafter(std::vector<std::unique_ptr<Drafter>> drafters);
  const char* name() const override { return "combined"; }
  bool needs_hidden() const override;
  void draft(const DraftRequest& req, Draft& out) override;
  void reset() override;
  const std::vector<std::unique_ptr<Drafter>>& drafters() const { return drafters_; }

 private:
  std::vector<std::unique_ptr<Drafter>> drafters_;
};

// The kinds named by a --spec value: "none", "mtp", "draft", "ngram", or a combination joined by
// ',' or '+' ("mtp,ngram"). Throws std::invalid_argument naming an unknown kind.
std::vector<std::string> parse_spec(const std::string& spec);

// Builds the drafter for a --spec value (nullptr for "none": plain decoding). `draft_models` are the
// -md files, matched by architecture: a gemma4-assistant serves "mtp", a gemma4 serves "draft".
// With "ngram" and a model drafter together, n-gram drafts are used when the match is >= 3 tokens.
// The returned drafter references the models and pool; they must outlive it.
std::unique_ptr<Drafter> make_drafter(const std::string& spec, const Model& target,
                                      const std::vector<const Model*>& draft_models, ThreadPool* pool,
                                      const SessionOptions& draft_session_opt);

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

class SpeculativeDecoder {
 public:
  // drafter may be null (plain decoding through the same code path). The session must use a
  // single-sequence cache; draft lengths are capped so that a round fits max_ubatch - 1 drafts.
  SpeculativeDecoder(Session& target, Drafter* drafter, const SpecOptions& opt = {});

  // Processes the prompt (reusing the session's cached prefix) and draws the first token from the
  // prompt's last logits. sampler == nullptr: greedy. Returns the first token.
  int32_t start(const std::vector<int32_t>& prompt, Sampler* sampler);
  // One round: returns the emitted tokens (1 .. draft length + 1). Throws std::length_error when the
  // context is full.
  const std::vector<int32_t>& step(Sampler* sampler);

  // Prompt + every emitted token; the last one is not in the target cache yet.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const SpecStats& stats() const { return stats_; }
  void reset_stats() { stats_ = SpecStats(); }
  DraftLengthController& length_controller() { return length_; }
  // The last verify batch: its logits rows (row i checks draft i+1) and drafted tokens.
  const ForwardOutputs& last_verify() const { return out_; }
  const Draft& last_draft() const { return draft_; }
  // Free context: a round can run while room() >= 0 (`last` still fits at position n_ctx - 1).
  int room() const { return session_.n_ctx() - int(tokens_.size()); }
  // Prompt tokens start() ran through the target (the rest came from the session's cache).
  int prompt_processed() const { return prompt_processed_; }
  // Hands the session back consistent with Session::tokens() (the last prompt given to start()):
  // rounds grew the target cache without Session knowing, so this rolls the cache back to it.
  void release();

 private:
  int32_t choose(const float* logits, Sampler* sampler);
  Session& session_;
  Drafter* drafter_;
  SpecOptions opt_;
  DraftLengthController length_;
  std::mt19937_64 rng_;
  std::vector<int32_t> tokens_;
  int prompt_processed_ = 0;
  std::vector<float> hidden_;  // target hidden state of the row before `last` (empty: none)
  std::vector<int32_t> emitted_;
  Draft draft_;
  ForwardOutputs out_;
  SpecStats stats_;
};

// The acceptance step for one drafted token (exposed for tests). p: the target's distribution,
// q: the drafter's (empty: point mass on `draft`). Returns true if the draft is accepted; otherwise
// `*replacement` holds the token drawn from norm(max(0, p - q)). `u` is a uniform draw in [0, 1).
bool accept_or_resample(const std::vector<TokenProb>& p, const std::vector<TokenProb>& q, int32_t draft, double u,
                        Sampler& sampler, int32_t* replacement);

// Generates n_predict tokens (fewer at an id in `stop_ids`, which is kept, or a full context) for
// benchmarks and tests. The last round may emit more; the result is cut to n_predict. Resets the
// decoder's statistics first, so `stats` covers this run (prompt included).
struct SpecRun {
  std::vector<int32_t> tokens;
  SpecStats stats;
};
SpecRun run_speculative(SpeculativeDecoder& dec, const std::vector<int32_t>& prompt, int n_predict, Sampler* sampler,
                        const std::vector<int32_t>& stop_ids = {});

}  // namespace gem4::generate
