#include "generate/drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernels/ops.h"

namespace gem4::generate {

int32_t argmax_token(const float* logits, int n_vocab) {
  const int64_t best = argmax_finite(logits, n_vocab);
  return best < 0 ? 0 : static_cast<int32_t>(best);
}

std::vector<TokenProb> proposal_distribution(const float* logits, int n_vocab, float temperature, int top_k) {
  top_k = std::clamp(top_k, 1, n_vocab);
  std::vector<int32_t> ids;
  ids.reserve(n_vocab);
  for (int i = 0; i < n_vocab; ++i)
    if (std::isfinite(logits[i])) ids.push_back(i);
  if (ids.empty()) throw std::runtime_error("proposal_distribution: no finite logit");
  const size_t k = std::min<size_t>(size_t(top_k), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  ids.resize(k);
  const float t = temperature > 0 ? temperature : 1.0f;
  const float mx = logits[ids[0]];
  std::vector<TokenProb> dist(k);
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    const double e = std::exp(double(logits[ids[i]] - mx) / t);
    dist[i] = {ids[i], float(e)};
    sum += e;
  }
  for (auto& tp : dist) tp.p = float(tp.p / sum);
  return dist;
}

int32_t draw(const std::vector<TokenProb>& dist, std::mt19937_64& rng) {
  if (dist.empty()) throw std::invalid_argument("draw: empty distribution");
  double total = 0;
  for (const auto& tp : dist) total += tp.p;
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double acc = 0;
  for (const auto& tp : dist) {
    acc += tp.p;
    if (u < acc && tp.p > 0) return tp.id;
  }
  for (auto it = dist.rbegin(); it != dist.rend(); ++it)  // u rounded up to the total
    if (it->p > 0) return it->id;
  return dist.back().id;
}

}  // namespace gem4::generate
