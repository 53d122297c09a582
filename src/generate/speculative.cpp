#include "generate/speculative.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <unordered_map>


namespace gem4::generate {

namespace {

// Probability of `id` in a sparse distribution (0 when absent).
class ProbLookup {
 public:
  explicit ProbLookup(const std::vector<TokenProb>& d) : d_(d) {
    if (d.size() > 32)
      for (const auto& tp : d) map_[tp.id] += tp.p;
  }
  double operator()(int32_t id) const {
    if (!map_.empty()) {
      auto it = map_.find(id);
      return it == map_.end() ? 0.0 : it->second;
    }
    double p = 0;
    for (const auto& tp : d_)
      if (tp.id == id) p += tp.p;
    return p;
  }

 private:
  const std::vector<TokenProb>& d_;
  std::unordered_map<int32_t, double> map_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Draft length

DraftLengthController::DraftLengthController(int draft_max, bool adaptive)
    : max_(std::max(0, draft_max)), adaptive_(adaptive), verify_(size_t(std::max(0, draft_max)) + 1, -1.0) {}

double DraftLengthController::acceptance_estimate() const { return acc_ / (acc_ + rej_); }

double DraftLengthController::verify_cost(int k) const {
  if (verify_[k] >= 0) return verify_[k];
  // Nearest measured sizes on each side; interpolate, or extrapolate in proportion to the rows.
  int lo = -1, hi = -1;
  for (int i = k - 1; i >= 0 && lo < 0; --i)
    if (verify_[i] >= 0) lo = i;
  for (int i = k + 1; i <= max_ && hi < 0; ++i)
    if (verify_[i] >= 0) hi = i;
  if (lo >= 0 && hi >= 0) return verify_[lo] + (verify_[hi] - verify_[lo]) * double(k - lo) / double(hi - lo);
  const int ref = lo >= 0 ? lo : hi;
  if (ref < 0) return 1.0;
  return verify_[ref] * double(k + 1) / double(ref + 1);
}

int DraftLengthController::next() {
  if (!adaptive_ || max_ == 0) return max_;
  ++round_;
  if (draft_cost_ < 0) return max_;  // nothing measured yet
  const double a = std::clamp(acceptance_estimate(), 0.0, 0.99);
  int best = 0;
  double best_rate = -1;
  for (int k = 0; k <= max_; ++k) {
    const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
    const double cost = k * draft_cost_ + verify_cost(k);
    const double rate = cost > 0 ? tokens / cost : tokens;
    if (rate > best_rate) best_rate = rate, best = k;
  }
  if (round_ % 16 == 0) return std::min(best + 1, max_);
  return best;
}

void DraftLengthController::record(int k, int a, double draft_s, double verify_s) {
  constexpr double kForget = 0.95, kEma = 0.2;
  if (k > 0) {
    acc_ = acc_ * kForget + a;
    rej_ = rej_ * kForget + (a < k ? 1.0 : 0.0);
    const double per = draft_s / k;
    draft_cost_ = draft_cost_ < 0 ? per : draft_cost_ + kEma * (per - draft_cost_);
  }
  if (k >= 0 && k <= max_) verify_[k] = verify_[k] < 0 ? verify_s : verify_[k] + kEma * (verify_s - verify_[k]);
}

// ---------------------------------------------------------------------------------------------
// Acceptance

bool accept_or_resample(const std::vector<TokenProb>& p, const std::vector<TokenProb>& q, int32_t draft, double u,
                        Sampler& sampler, int32_t* replacement) {
  // p may span the whole vocabulary; q is small (a drafter's top-k) or empty (a point mass).
  double pd = 0;
  for (const auto& tp : p)
    if (tp.id == draft) pd += tp.p;
  const ProbLookup ql(q);
  const double qd = q.empty() ? 1.0 : ql(draft);
  const double ratio = qd > 0 ? pd / qd : (pd > 0 ? 1.0 : 0.0);
  if (u < std::min(1.0, ratio)) return true;
  // Rejected: draw from norm(max(0, p - q)).
  std::vector<TokenProb> residual;
  residual.reserve(p.size());
  double total = 0;
  for (const auto& tp : p) {
    const double qi = q.empty() ? (tp.id == draft ? 1.0 : 0.0) : ql(tp.id);
    const double r = double(tp.p) - qi;
    if (r > 0) {
      residual.push_back({tp.id, float(r)});
      total += r;
    }
  }
  *replacement = total > 0 ? sampler.sample_from(residual) : sampler.sample_from(p);
  return false;
}

// ---------------------------------------------------------------------------------------------
// The decoder

std::string SpecStats::summary() const {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "speculative: %lld rounds, drafted %lld, accepted %lld (%.1f %%), mean accepted %.2f per drafting "
                "round, %.2f tokens per round; %lld tokens in %.3f s (prompt %.3f s, draft %.3f s, verify %.3f s), "
                "%.1f tokens/s after the prompt",
                (long long)rounds, (long long)drafted, (long long)accepted, 100.0 * acceptance_rate(), mean_accepted(),
                tokens_per_round(), (long long)generated, total_s, prompt_s, draft_s, verify_s, decode_tokens_per_s());
  return buf;
}

}  // namespace gem4::generate
