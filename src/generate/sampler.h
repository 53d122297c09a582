// Token sampling from a row of logits, and a matcher for stop strings.
//
// The chain, in order (llama.cpp's default order; logit bias sits right after the penalties):
//   1. penalties      over the last repeat_last_n accepted tokens, each distinct token once:
//                     repeat:    logit > 0 ? logit / repeat_penalty : logit * repeat_penalty
//                     frequency: logit -= count * frequency_penalty
//                     presence:  logit -= presence_penalty
//   2. logit bias     logit += bias (-infinity bans a token)
//   -- temperature <= 0: greedy, the argmax of the logits so far (lowest id on ties); stop here --
//   3. top-k          keep the k highest logits (ties broken toward the lower id)
//   4. top-p          keep the smallest prefix, by descending probability, whose probability sum
//                     reaches top_p (probabilities at temperature 1 over the tokens still in)
//   5. min-p          keep tokens whose probability is at least min_p times the highest
//   6. temperature    probabilities = softmax(logit / temperature) over the tokens still in
//   7. draw           from that distribution with the sampler's own std::mt19937_64
// Tokens whose logit is -infinity or NaN never survive. At least one token always survives (if any
// logit is finite; otherwise sampling throws).
//
// Cost on a 262,144-entry vocabulary: one pass to copy the logits when penalties or biases apply,
// then one pass for argmax or top-k (a bounded heap), and the rest on the few survivors. With top-k
// off, top-p finds its cut from a histogram of probability mass over logit buckets and sorts only
// the tokens of the bucket where the cut falls; the vocabulary is never fully sorted.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gem4::generate {

struct SamplingParams {
  float temperature = 1.0f;        // <= 0: greedy
  int32_t top_k = 64;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.0f;              // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off
  int32_t repeat_last_n = 64;      // penalty window in tokens; 0: penalties off; -1: all accepted
  float presence_penalty = 0.0f;   // 0: off
  float frequency_penalty = 0.0f;  // 0: off
  uint64_t seed = 0;
  std::unordered_map<int32_t, float> logit_bias;  // token id -> added to its logit
};

struct TokenProb {
  int32_t id;
  float p;
};

class Sampler {
 public:
  // Throws std::invalid_argument for a non-finite temperature/top_p/min_p/penalty or a
  // repeat_penalty <= 0.
  explicit Sampler(SamplingParams params);

  // Runs the chain on `logits` (n_vocab values, not modified) and draws a token. Does not
  // accept() it. Throws std::invalid_argument if n_vocab <= 0 or a logit_bias id is out of range,
  // std::runtime_error if no logit is finite.
  int32_t sample(const float* logits, int n_vocab);

  // The final distribution of the chain (step 6): the surviving tokens and their probabilities,
  // which sum to 1; every other token has probability 0. Greedy gives the argmax with p = 1. Order:
  // descending probability when top-k applied, otherwise unspecified. The result stays valid until
  // the next call on this sampler. sample() draws from exactly this.
  const std::vector<TokenProb>& distribution(const float* logits, int n_vocab);

  // Draws from a distribution (probabilities need not sum exactly to 1) with this sampler's
  // generator; and a uniform draw in [0, 1). Both for speculative decoding's accept/reject step.
  int32_t sample_from(const std::vector<TokenProb>& dist);
  double uniform();

  // Records a generated (or prompt) token for the penalties.
  void accept(int32_t token);
  // Forgets the history and restarts the generator from the seed.
  void reset();

  const SamplingParams& params() const { return params_; }
  const std::vector<int32_t>& history() const { return history_; }

 private:
  // Logits after penalties and bias: `logits` itself when neither applies, else a working copy.
  const float* adjusted_logits(const float* logits, int n_vocab);
  void truncate_top_k(const float* logits, int n_vocab);
  void truncate_top_p();
  void truncate_min_p();

  struct Candidate {
    int32_t id;
    float logit;
  };

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;  // accepted tokens, trimmed to the penalty window
  std::vector<float> work_;       // adjusted logits
  std::vector<Candidate> cand_;   // survivors of the chain
  bool cand_sorted_ = false;      // cand_ is in descending logit order
  std::vector<TokenProb> dist_;
  std::vector<double> bucket_mass_;              // top-p without top-k: probability mass per logit bucket
  std::vector<uint16_t> bucket_of_;              // and each candidate's bucket
  std::unordered_map<int32_t, int32_t> counts_;  // token -> occurrences in the penalty window
};

// Stop strings for streamed text: feed each new piece of text; it says which part is safe to show
// (never a prefix of a stop string that might still complete) and whether a stop string completed.
// When several stop strings could complete, the one that completes first (ends earliest) wins, so
// the result does not depend on how the text was cut into pieces.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);  // empty strings are ignored

  struct Result {
    std::string text;      // safe to emit now; on a stop, the text before the stop string
    bool stopped = false;  // a stop string completed; later feeds return nothing
    std::string stop;      // which one
  };
  Result feed(std::string_view text);
  // End of generation without a stop: returns the text still held back.
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::vector<std::string>& stop_strings() const { return stops_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: could be the start of a stop string
  bool stopped_ = false;
};

}  // namespace gem4::generate
