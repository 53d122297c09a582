#include "generate/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "kernels/ops.h"

namespace gem4::generate {
namespace {

bool finite_logit(float v) { return v >= -FLT_MAX && v <= FLT_MAX; }  // false for NaN and +-inf

void require_finite(float v, const char* name) {
  if (!std::isfinite(v))
    throw std::invalid_argument(std::string("SamplingParams.") + name + " must be finite");
}

}  // namespace

Sampler::Sampler(SamplingParams params) : params_(std::move(params)), rng_(params_.seed) {
  require_finite(params_.temperature, "temperature");
  require_finite(params_.top_p, "top_p");
  require_finite(params_.min_p, "min_p");
  require_finite(params_.repeat_penalty, "repeat_penalty");
  require_finite(params_.presence_penalty, "presence_penalty");
  require_finite(params_.frequency_penalty, "frequency_penalty");
  if (params_.repeat_penalty <= 0) throw std::invalid_argument("SamplingParams.repeat_penalty must be > 0");
  for (const auto& [id, bias] : params_.logit_bias)
    if (std::isnan(bias))
      throw std::invalid_argument("SamplingParams.logit_bias[" + std::to_string(id) + "] is NaN");
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n == 0) return;
  history_.push_back(token);
  if (params_.repeat_last_n > 0 && history_.size() > size_t(params_.repeat_last_n))
    history_.erase(history_.begin(), history_.end() - params_.repeat_last_n);
}

void Sampler::reset() {
  history_.clear();
  rng_.seed(params_.seed);
}

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

const float* Sampler::adjusted_logits(const float* logits, int n_vocab) {
  const bool penalize =
      !history_.empty() && (params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                            params_.frequency_penalty != 0.0f);
  if (!penalize && params_.logit_bias.empty()) return logits;
  for (const auto& [id, bias] : params_.logit_bias)
    if (id < 0 || id >= n_vocab)
      throw std::invalid_argument("Sampler: logit_bias token " + std::to_string(id) +
                                  " is outside the vocabulary (n_vocab " + std::to_string(n_vocab) + ")");
  work_.assign(logits, logits + n_vocab);
  if (penalize) {
    counts_.clear();
    for (int32_t t : history_)  // history_ holds exactly the penalty window
      if (t >= 0 && t < n_vocab) ++counts_[t];
    for (const auto& [t, count] : counts_) {
      float& l = work_[t];
      l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
      l -= float(count) * params_.frequency_penalty + params_.presence_penalty;
    }
  }
  for (const auto& [id, bias] : params_.logit_bias) work_[id] += bias;
  return work_.data();
}

// Keeps the top_k best logits in cand_, best first (or every finite logit, unsorted, when top-k is
// off). A bounded heap whose front is the worst kept candidate: most logits lose one comparison.
void Sampler::truncate_top_k(const float* logits, int n_vocab) {
  cand_.clear();
  const int k = params_.top_k;
  if (k <= 0 || k >= n_vocab) {
    cand_.reserve(n_vocab);
    for (int i = 0; i < n_vocab; ++i)
      if (finite_logit(logits[i])) cand_.push_back({i, logits[i]});
    cand_sorted_ = false;
    return;
  }
  // `better`: higher logit, then lower id. As a heap comparator it puts the worst at the front.
  auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  cand_.reserve(k);
  int i = 0;
  for (; i < n_vocab && int(cand_.size()) < k; ++i)
    if (finite_logit(logits[i])) cand_.push_back({i, logits[i]});
  std::make_heap(cand_.begin(), cand_.end(), better);
  float worst = cand_.empty() ? 0.0f : cand_.front().logit;
  for (; i < n_vocab; ++i) {
    const float v = logits[i];
    // A later id with an equal logit loses the tie, so only a strictly larger value gets in.
    if (v > worst && v <= FLT_MAX) {
      std::pop_heap(cand_.begin(), cand_.end(), better);
      cand_.back() = {i, v};
      std::push_heap(cand_.begin(), cand_.end(), better);
      worst = cand_.front().logit;
    }
  }
  std::sort_heap(cand_.begin(), cand_.end(), better);  // best first
  cand_sorted_ = true;
}

// Keeps the shortest best-first prefix whose probability (softmax at temperature 1 over cand_)
// reaches top_p. Sorted candidates (after top-k, a few) are walked in order. The whole vocabulary is
// not sorted: one pass sums the probability mass into buckets of logit distance from the maximum;
// buckets above the one where the running sum crosses top_p are kept whole, and only that one
// bucket's tokens are sorted to find the exact cut.
void Sampler::truncate_top_p() {
  if (cand_.empty()) return;
  auto better = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  float max_logit = cand_[0].logit;
  if (!cand_sorted_)
    for (const Candidate& c : cand_) max_logit = std::max(max_logit, c.logit);

  if (cand_sorted_) {
    double z = 0;
    for (const Candidate& c : cand_) z += std::exp(double(c.logit) - max_logit);
    const double target = double(params_.top_p) * z;  // compare unnormalised sums
    double cum = 0;
    for (size_t j = 0; j < cand_.size(); ++j) {
      cum += std::exp(double(cand_[j].logit) - max_logit);
      if (cum >= target) {
        cand_.resize(j + 1);
        return;
      }
    }
    return;  // rounding kept the sum just under top_p: keep everything
  }

  // Bucket b holds logits in [max - (b+1)*w, max - b*w), w = kRange / kBuckets; the last bucket
  // takes everything further down (each weighs less than e^-32 of the best).
  constexpr int kBuckets = 2048;
  constexpr double kRange = 32.0;
  constexpr double kPerUnit = kBuckets / kRange;
  bucket_mass_.assign(kBuckets + 1, 0.0);
  bucket_of_.resize(cand_.size());
  double z = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    const double d = double(max_logit) - cand_[i].logit;
    const int b = d < kRange ? int(d * kPerUnit) : kBuckets;
    const double w = std::exp(-d);
    bucket_mass_[b] += w;
    z += w;
    bucket_of_[i] = uint16_t(b);
  }
  const double target = double(params_.top_p) * z;
  double cum = 0;
  int cut = 0;  // the bucket in which the running sum reaches the target
  while (cut <= kBuckets && cum + bucket_mass_[cut] < target) cum += bucket_mass_[cut++];
  if (cut > kBuckets) return;  // rounding: keep everything

  std::vector<Candidate> kept, boundary;
  for (size_t i = 0; i < cand_.size(); ++i) {
    if (bucket_of_[i] < cut)
      kept.push_back(cand_[i]);
    else if (bucket_of_[i] == cut)
      boundary.push_back(cand_[i]);
  }
  std::sort(boundary.begin(), boundary.end(), better);
  for (const Candidate& c : boundary) {
    kept.push_back(c);
    cum += std::exp(double(c.logit) - max_logit);
    if (cum >= target) break;
  }
  cand_ = std::move(kept);
}

// Keeps tokens with p >= min_p * p_max, i.e. logit >= max_logit + ln(min_p). Keeps the order.
void Sampler::truncate_min_p() {
  if (cand_.empty()) return;
  float max_logit = cand_[0].logit;
  if (!cand_sorted_)
    for (const Candidate& c : cand_) max_logit = std::max(max_logit, c.logit);
  // min_p above 1 would drop even the best token; it means "only the best".
  const float threshold = max_logit + std::log(std::min(params_.min_p, 1.0f));
  cand_.erase(
      std::remove_if(cand_.begin(), cand_.end(), [&](const Candidate& c) { return c.logit < threshold; }),
      cand_.end());
}

const std::vector<TokenProb>& Sampler::distribution(const float* logits, int n_vocab) {
  if (n_vocab <= 0) throw std::invalid_argument("Sampler: n_vocab must be positive");
  dist_.clear();
  const float* l = adjusted_logits(logits, n_vocab);

  if (params_.temperature <= 0) {
    const auto best = static_cast<int32_t>(argmax_finite(l, n_vocab));
    if (best < 0) throw std::runtime_error("Sampler: no token has a finite logit");
    dist_.push_back({best, 1.0f});
    return dist_;
  }

  truncate_top_k(l, n_vocab);
  if (cand_.empty()) throw std::runtime_error("Sampler: no token has a finite logit");
  if (params_.top_p < 1.0f) truncate_top_p();
  if (params_.min_p > 0.0f) truncate_min_p();

  float max_logit = cand_[0].logit;
  if (!cand_sorted_)
    for (const Candidate& c : cand_) max_logit = std::max(max_logit, c.logit);
  const double inv_t = 1.0 / double(params_.temperature);
  double sum = 0;
  dist_.reserve(cand_.size());
  for (const Candidate& c : cand_) {
    const double w = std::exp((double(c.logit) - max_logit) * inv_t);  // in (0, 1]
    sum += w;
    dist_.push_back({c.id, float(w)});
  }
  const double inv_sum = 1.0 / sum;
  for (TokenProb& t : dist_) t.p = float(t.p * inv_sum);
  return dist_;
}

int32_t Sampler::sample_from(const std::vector<TokenProb>& dist) {
  double total = 0;
  for (const TokenProb& t : dist) total += t.p;
  if (dist.empty() || !(total > 0)) throw std::runtime_error("Sampler: empty distribution");
  const double u = uniform() * total;
  double acc = 0;
  int32_t last = dist[0].id;
  for (const TokenProb& t : dist) {
    if (t.p <= 0) continue;
    acc += t.p;
    last = t.id;
    if (u < acc) return t.id;
  }
  return last;  // u landed in the rounding gap at the very end
}

int32_t Sampler::sample(const float* logits, int n_vocab) {
  const std::vector<TokenProb>& dist = distribution(logits, n_vocab);
  if (params_.temperature <= 0) return dist[0].id;  // greedy draws nothing from the generator
  return sample_from(dist);
}

// ---- stop strings -------------------------------------------------------------------------------

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (std::string& s : stop_strings)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopStringMatcher::Result StopStringMatcher::feed(std::string_view text) {
  Result r;
  if (stopped_) return r;
  pending_.append(text);

  // The stop string that completes first; on equal ends, the longer one.
  size_t best_end = std::string::npos, best_start = 0;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const size_t p = pending_.find(s);
    if (p == std::string::npos) continue;
    const size_t end = p + s.size();
    if (!best || end < best_end || (end == best_end && p < best_start)) {
      best_end = end;
      best_start = p;
      best = &s;
    }
  }
  if (best) {
    r.text = pending_.substr(0, best_start);
    r.stopped = true;
    r.stop = *best;
    stopped_ = true;
    pending_.clear();
    return r;
  }

  // Hold back the longest tail that is the start of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(pending_.size(), s.size() - 1); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  r.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopStringMatcher::flush() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace gem4::generate
