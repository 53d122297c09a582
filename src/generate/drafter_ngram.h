// Prompt lookup / n-gram drafting (no model): find the most recent earlier place in the sequence
// where its last n tokens occurred, for n = max_n down to min_n, and propose the tokens that
// followed there. Proposals are deterministic, so each is a point mass for the acceptance rule.
#pragma once
#include "generate/drafter.h"

namespace gem4::generate {

class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(int min_n = 1, int max_n = 3) : min_n(min_n), max_n(max_n) {}
  const char* name() const override { return "ngram"; }
  void draft(const DraftRequest& req, Draft& out) override;

  int min_n, max_n;
};

// The proposal on its own: up to n_max tokens following the most recent earlier occurrence of the
// last n tokens of `tokens` (largest n in [min_n, max_n] that matches). Returns the match length
// (0: none) and fills `proposal`.
int ngram_lookup(const std::vector<int32_t>& tokens, int min_n, int max_n, int n_max, std::vector<int32_t>& proposal);

}  // namespace gem4::generate
