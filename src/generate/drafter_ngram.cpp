#include "generate/drafter_ngram.h"

#include <algorithm>

namespace gem4::generate {

int ngram_lookup(const std::vector<int32_t>& tokens, int min_n, int max_n, int n_max, std::vector<int32_t>& proposal) {
  proposal.clear();
  const int len = int(tokens.size());
  if (n_max <= 0) return 0;
  min_n = std::max(1, min_n);
  for (int n = std::min(max_n, len - 1); n >= min_n; --n) {
    const int32_t* pattern = tokens.data() + len - n;
    // Most recent earlier occurrence: it starts at j < len - n and is followed by at least one token.
    for (int j = len - n - 1; j >= 0; --j) {
      if (!std::equal(pattern, pattern + n, tokens.data() + j)) continue;
      const int from = j + n, to = std::min(len, from + n_max);
      proposal.assign(tokens.begin() + from, tokens.begin() + to);
      return n;
    }
  }
  return 0;
}

void NgramDrafter::draft(const DraftRequest& req, Draft& out) {
  out.source = name();
  out.match = ngram_lookup(*req.tokens, min_n, max_n, req.n_max, out.tokens);
}

}  // namespace gem4::generate
