#include "generate/speculative.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <unordered_map>

#include "generate/drafter_model.h"
#include "generate/drafter_mtp.h"
#include "generate/drafter_ngram.h"

namespace gem4::generate {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
// Drafters and the --spec value

CombinedDrafter::CombinedDrafter(std::vector<std::unique_ptr<Drafter>> drafters) : drafters_(std::move(drafters)) {
  if (drafters_.empty()) throw std::invalid_argument("CombinedDrafter: no drafters");
}

bool CombinedDrafter::needs_hidden() const {
  for (const auto& d : drafters_)
    if (d->needs_hidden()) return true;
  return false;
}

void CombinedDrafter::draft(const DraftRequest& req, Draft& out) {
  for (const auto& d : drafters_) {
    out.clear();
    d->draft(req, out);
    if (!out.tokens.empty()) return;
  }
}

void CombinedDrafter::reset() {
  for (const auto& d : drafters_) d->reset();
}

std::vector<std::string> parse_spec(const std::string& spec) {
  std::vector<std::string> kinds;
  std::string cur;
  auto flush = [&]() {
    std::string k;
    for (char c : cur)
      if (!std::isspace(static_cast<unsigned char>(c))) k += char(std::tolower(static_cast<unsigned char>(c)));
    cur.clear();
    if (k.empty()) return;
    if (k != "none" && k != "mtp" && k != "draft" && k != "ngram")
      throw std::invalid_argument("--spec: '" + k + "' is not one of none, mtp, draft, ngram");
    if (std::find(kinds.begin(), kinds.end(), k) != kinds.end())
      throw std::invalid_argument("--spec: '" + k + "' given twice in '" + spec + "'");
    kinds.push_back(k);
  };
  for (char c : spec) {
    if (c == ',' || c == '+') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  if (std::find(kinds.begin(), kinds.end(), "none") != kinds.end()) {
    if (kinds.size() > 1) throw std::invalid_argument("--spec: 'none' cannot be combined with other kinds ('" + spec + "')");
    kinds.clear();
  }
  return kinds;
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec, const Model& target,
                                      const std::vector<const Model*>& draft_models, ThreadPool* pool,
                                      const SessionOptions& draft_session_opt) {
  const std::vector<std::string> kinds = parse_spec(spec);
  if (kinds.empty()) return nullptr;
  const Model* assistant = nullptr;
  const Model* small = nullptr;
  for (const Model* m : draft_models) {
    if (!m) continue;
    if (m->config.arch == "gemma4-assistant" && !assistant) assistant = m;
    if (m->config.arch == "gemma4" && !small) small = m;
  }
  const bool ngram = std::find(kinds.begin(), kinds.end(), "ngram") != kinds.end();
  std::vector<std::unique_ptr<Drafter>> models;
  for (const std::string& k : kinds) {
    if (k == "mtp") {
      if (!assistant) throw std::invalid_argument("--spec mtp needs -md FILE with a gemma4-assistant (MTP) model");
      auto mtp = std::make_unique<MtpDrafter>(*assistant, target, pool);
      mtp->assistant().exact_gelu = draft_session_opt.switches.exact_gelu;
      models.push_back(std::move(mtp));
    } else if (k == "draft") {
      if (!small) throw std::invalid_argument("--spec draft needs -md FILE with a smaller gemma4 model");
      models.push_back(std::make_unique<ModelDrafter>(*small, target, pool, draft_session_opt));
    }
  }
  std::vector<std::unique_ptr<Drafter>> all;
  if (ngram) all.push_back(std::make_unique<NgramDrafter>(models.empty() ? 1 : 3, 3));
  for (auto& m : models) all.push_back(std::move(m));
  if (all.size() == 1) return std::move(all.front());
  return std::make_unique<CombinedDrafter>(std::move(all));
}

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

SpeculativeDecoder::SpeculativeDecoder(Session& target, Drafter* drafter, const SpecOptions& opt)
    : session_(target),
      drafter_(drafter),
      opt_(opt),
      length_(std::min(opt.draft_max, target.kv().max_ubatch() - 1), opt.adaptive),
      rng_(opt.seed ^ 0x9e3779b97f4a7c15ull) {
  if (target.kv().n_seq() != 1) throw std::invalid_argument("SpeculativeDecoder: the target session must hold one sequence");
  if (opt.draft_max < 0) throw std::invalid_argument("--draft-max must not be negative");
}

int32_t SpeculativeDecoder::choose(const float* logits, Sampler* sampler) {
  const int V = session_.n_vocab();
  return sampler ? sampler->sample(logits, V) : argmax_token(logits, V);
}

int32_t SpeculativeDecoder::start(const std::vector<int32_t>& prompt, Sampler* sampler) {
  const auto t0 = Clock::now();
  const bool want_hidden = drafter_ && drafter_->needs_hidden();
  session_.want_hidden = want_hidden;
  prompt_processed_ = session_.set_tokens(prompt);
  tokens_ = prompt;
  hidden_.clear();
  if (want_hidden) hidden_.assign(session_.hidden(), session_.hidden() + session_.model().config.d_model);
  const int32_t first = choose(session_.logits(), sampler);
  if (sampler) sampler->accept(first);
  tokens_.push_back(first);
  stats_.generated++;
  const double secs = seconds_since(t0);
  stats_.prompt_s += secs;
  stats_.total_s += secs;
  return first;
}

void SpeculativeDecoder::release() {
  // Session::truncate recomputes the kept tokens when the sliding rings no longer hold what the
  // next position needs (a generation longer than the rings' spare cells).
  const int n = int(session_.tokens().size());
  if (session_.kv().seq_len(0) > n) session_.truncate(n);
}

const std::vector<int32_t>& SpeculativeDecoder::step(Sampler* sampler) {
  const auto t0 = Clock::now();
  if (tokens_.empty()) throw std::logic_error("SpeculativeDecoder::step before start");
  const int n = int(tokens_.size());
  KvCache& kv = session_.kv();
  if (n > session_.n_ctx())
    throw std::length_error("the context of " + std::to_string(session_.n_ctx()) + " tokens is full");
  if (kv.seq_len(0) != n - 1)
    throw std::logic_error("SpeculativeDecoder: the target session was changed outside the decoder");
  const int V = session_.n_vocab();
  const float temperature = sampler ? sampler->params().temperature : 0.0f;
  const bool greedy = temperature <= 0;

  // 1. Draft.
  int k = std::min({length_.next(), session_.n_ctx() - n, kv.max_ubatch() - 1});
  draft_.clear();
  if (drafter_ && k > 0) {
    DraftRequest req;
    req.tokens = &tokens_;
    req.hidden = hidden_.empty() ? nullptr : hidden_.data();
    req.target_kv = &kv;
    req.seq = 0;
    req.n_max = k;
    req.temperature = greedy ? 0.0f : temperature;
    req.rng = &rng_;
    drafter_->draft(req, draft_);
    if (int(draft_.tokens.size()) > k) draft_.tokens.resize(k);
  }
  const int kd = int(draft_.tokens.size());
  const auto t1 = Clock::now();

  // 2. Verify [last, d1..dk] in one batch, every row an output row.
  const bool want_hidden = drafter_ && drafter_->needs_hidden();
  Batch batch;
  batch.reserve(kd + 1);
  for (int i = 0; i <= kd; ++i) {
    const int32_t tok = i == 0 ? tokens_.back() : draft_.tokens[i - 1];
    batch.push_back({tok, int32_t(n - 1 + i), 0, true, want_hidden});
  }
  out_.clear();
  session_.forward().run(batch, kv, out_);
  const auto t2 = Clock::now();

  // 3. Accept the longest passing prefix, then one more token.
  int a = 0;
  int32_t next = -1;
  for (; a < kd; ++a) {
    const float* row = out_.logits_of(a);
    const int32_t d = draft_.tokens[a];
    if (!sampler) {
      const int32_t t = argmax_token(row, V);
      if (t != d) {
        next = t;
        break;
      }
      continue;
    }
    const std::vector<TokenProb> p = sampler->distribution(row, V);
    bool ok;
    int32_t repl = -1;
    if (greedy) {
      ok = !p.empty() && p.front().id == d;
      if (!ok) repl = p.front().id;
    } else {
      static const std::vector<TokenProb> kPointMass;
      const std::vector<TokenProb>& q = a < int(draft_.q.size()) ? draft_.q[a] : kPointMass;
      ok = accept_or_resample(p, q, d, sampler->uniform(), *sampler, &repl);
    }
    if (!ok) {
      next = repl;
      break;
    }
    sampler->accept(d);
  }
  if (a == kd) next = choose(out_.logits_of(kd), sampler);
  if (sampler) sampler->accept(next);

  // 4. Roll back the rejected rows and move on.
  kv.truncate(0, n + a);
  emitted_.assign(draft_.tokens.begin(), draft_.tokens.begin() + a);
  emitted_.push_back(next);
  tokens_.insert(tokens_.end(), emitted_.begin(), emitted_.end());
  if (want_hidden) {
    const float* h = out_.hidden_of(a);
    hidden_.assign(h, h + out_.d_model);
  }

  const double draft_s = std::chrono::duration<double>(t1 - t0).count();
  const double verify_s = std::chrono::duration<double>(t2 - t1).count();
  length_.record(kd, a, draft_s, verify_s);
  stats_.rounds++;
  stats_.drafted += kd;
  stats_.accepted += a;
  stats_.draft_rounds += kd > 0 ? 1 : 0;
  stats_.generated += int64_t(emitted_.size());
  stats_.draft_s += draft_s;
  stats_.verify_s += verify_s;
  stats_.total_s += seconds_since(t0);
  return emitted_;
}

SpecRun run_speculative(SpeculativeDecoder& dec, const std::vector<int32_t>& prompt, int n_predict, Sampler* sampler,
                        const std::vector<int32_t>& stop_ids) {
  SpecRun r;
  dec.reset_stats();
  if (n_predict <= 0) return r;
  auto is_stop = [&](int32_t t) { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); };
  r.tokens.push_back(dec.start(prompt, sampler));
  bool stopped = is_stop(r.tokens.back());
  while (!stopped && int(r.tokens.size()) < n_predict && dec.room() >= 0) {
    for (int32_t t : dec.step(sampler)) {
      r.tokens.push_back(t);
      if (is_stop(t)) {
        stopped = true;
        break;
      }
    }
  }
  if (int(r.tokens.size()) > n_predict) r.tokens.resize(n_predict);
  r.stats = dec.stats();
  return r;
}

}  // namespace gem4::generate
