// Sampler and StopStringMatcher. References are computed here independently (full sorts, plain
// softmax, the penalty formulas written out), never taken from the sampler itself.
#include "generate/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace gem4::generate {
namespace {

constexpr int kVocab = 262144;  // Gemma 4

std::vector<float> random_logits(int n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int first_argmax(const std::vector<float>& v) {
  return int(std::max_element(v.begin(), v.end()) - v.begin());  // first of equal maxima
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  const double m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp((logits[i] - m) / temperature);
  for (double& x : p) x /= z;
  return p;
}

SamplingParams plain(float temperature) {  // no truncation, no penalties
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::map<int32_t, double> as_map(const std::vector<TokenProb>& dist) {
  std::map<int32_t, double> m;
  for (const TokenProb& t : dist) m[t.id] += t.p;
  return m;
}

// P(X >= x) for a chi-square variable with an even number of degrees of freedom (closed form).
double chi_square_survival_even_df(double x, int df) {
  double term = 1, sum = 1;
  for (int i = 1; i < df / 2; ++i) sum += term *= (x / 2) / i;
  return std::exp(-x / 2) * sum;
}

TEST(Sampler, GreedyIsArgmax) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto logits = random_logits(kVocab, seed);
    Sampler s(plain(0.0f));
    EXPECT_EQ(s.sample(logits.data(), kVocab), first_argmax(logits));
    const auto& d = s.distribution(logits.data(), kVocab);
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].p, 1.0f);
  }
  std::vector<float> ties = {1, 5, 2, 5, 5};
  Sampler s(plain(-1.0f));
  EXPECT_EQ(s.sample(ties.data(), 5), 1);  // lowest id among equal maxima
}

TEST(Sampler, TopKOneIsGreedy) {
  for (uint32_t seed : {4u, 5u, 6u}) {
    const auto logits = random_logits(kVocab, seed);
    SamplingParams p;
    p.temperature = 1.3f;
    p.top_k = 1;
    p.seed = seed;
    Sampler s(p);
    for (int draw = 0; draw < 5; ++draw) EXPECT_EQ(s.sample(logits.data(), kVocab), first_argmax(logits));
  }
}

TEST(Sampler, DistributionIsSoftmaxOverTemperature) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f, -4.0f, 1.5f};
  for (float t : {0.5f, 1.0f, 2.0f}) {
    Sampler s(plain(t));
    const auto got = as_map(s.distribution(logits.data(), int(logits.size())));
    const auto want = softmax(logits, t);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.at(int32_t(i)), want[i], 1e-6);
  }
}

// With a fixed seed, draw frequencies match softmax(logits / T): a chi-square goodness-of-fit test.
TEST(Sampler, EmpiricalFrequenciesMatchSoftmax) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -1.0f, 0.7f, 0.3f};  // df 8
  for (float t : {0.7f, 1.5f}) {
    SamplingParams p = plain(t);
    p.seed = 42;
    Sampler s(p);
    const int n = 60000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[s.sample(logits.data(), int(logits.size()))];
    const auto prob = softmax(logits, t);
    double chi2 = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      const double expected = n * prob[i];
      chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    }
    const double p_value = chi_square_survival_even_df(chi2, int(logits.size()) - 1);
    EXPECT_GT(p_value, 1e-3) << "T=" << t << " chi2=" << chi2;
  }
}

TEST(Sampler, SameSeedSameDraws) {
  const auto logits = random_logits(kVocab, 7, 1.0f);
  SamplingParams p;
  p.seed = 99;
  p.top_k = 200;
  Sampler a(p), b(p);
  std::vector<int32_t> da, db;
  for (int i = 0; i < 50; ++i) {
    da.push_back(a.sample(logits.data(), kVocab));
    db.push_back(b.sample(logits.data(), kVocab));
  }
  EXPECT_EQ(da, db);
  EXPECT_GT(std::set<int32_t>(da.begin(), da.end()).size(), 5u);  // it does sample
  a.reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 50; ++i) again.push_back(a.sample(logits.data(), kVocab));
  EXPECT_EQ(again, da);
  p.seed = 100;
  Sampler c(p);
  std::vector<int32_t> dc;
  for (int i = 0; i < 50; ++i) dc.push_back(c.sample(logits.data(), kVocab));
  EXPECT_NE(dc, da);
}

// probabilities 0.4 0.3 0.2 0.1 (shuffled ids): the kept set for several top_p values.
TEST(Sampler, TopPKeepsTheShortestPrefixReachingP) {
  const std::vector<float> logits = {std::log(0.2f), std::log(0.4f), std::log(0.1f), std::log(0.3f)};
  struct Case {
    float top_p;
    std::map<int32_t, double> want;
  };
  const Case cases[] = {
      {0.35f, {{1, 1.0}}},
      {0.65f, {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}}},
      {0.75f, {{1, 0.4 / 0.9}, {3, 0.3 / 0.9}, {0, 0.2 / 0.9}}},
      {0.95f, {{1, 0.4}, {3, 0.3}, {0, 0.2}, {2, 0.1}}},
  };
  for (const Case& c : cases) {
    SamplingParams p = plain(1.0f);
    p.top_p = c.top_p;
    Sampler s(p);
    const auto got = as_map(s.distribution(logits.data(), 4));
    ASSERT_EQ(got.size(), c.want.size()) << "top_p " << c.top_p;
    for (const auto& [id, prob] : c.want) EXPECT_NEAR(got.at(id), prob, 1e-6) << "top_p " << c.top_p;
  }
}

// Top-p with top-k off on the full vocabulary (the partial-sort path), against a full sort.
TEST(Sampler, TopPOnTheWholeVocabularyMatchesAFullSort) {
  const int n = 1 << 16;  // a quarter of Gemma's vocabulary keeps the reference sort quick
  for (float scale : {0.3f, 1.0f, 4.0f, 12.0f}) {  // flat to peaked: from most tokens to a few
    const auto logits = random_logits(n, 11, scale);
    SamplingParams p = plain(1.0f);
    p.top_p = 0.9f;
    Sampler s(p);
    std::vector<double> got(n, 0.0);
    size_t kept_count = 0;
    for (const TokenProb& t : s.distribution(logits.data(), n)) got[t.id] = t.p, ++kept_count;

    const auto prob = softmax(logits);
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    double cum = 0;
    size_t keep = 0;
    while (keep < order.size() && cum < 0.9) cum += prob[order[keep++]];
    ASSERT_EQ(kept_count, keep) << "scale " << scale;
    for (size_t i = 0; i < keep; ++i) {
      ASSERT_GT(got[order[i]], 0.0) << "scale " << scale << " rank " << i;
      ASSERT_NEAR(got[order[i]], prob[order[i]] / cum, 1e-6);
    }
  }
  // All equal: exactly half the vocabulary, the lowest ids.
  std::vector<float> flat(kVocab, 0.0f);
  SamplingParams p = plain(1.0f);
  p.top_p = 0.5f;
  Sampler s(p);
  const auto& d = s.distribution(flat.data(), kVocab);
  ASSERT_EQ(d.size(), size_t(kVocab / 2));
  int32_t max_id = 0;
  for (const TokenProb& t : d) max_id = std::max(max_id, t.id);
  EXPECT_EQ(max_id, kVocab / 2 - 1);
}

// probabilities 0.5 0.25 0.15 0.1: min_p keeps p >= min_p * 0.5.
TEST(Sampler, MinPKeepsTokensAboveAFractionOfTheBest) {
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.1f), std::log(0.25f)};
  struct Case {
    float min_p;
    std::set<int32_t> want;
  };
  const Case cases[] = {{0.1f, {0, 1, 2, 3}}, {0.25f, {0, 1, 3}}, {0.35f, {1, 3}},
                        {0.6f, {1}},          {1.0f, {1}},        {3.0f, {1}}};
  for (const Case& c : cases) {
    SamplingParams p = plain(1.0f);
    p.min_p = c.min_p;
    Sampler s(p);
    const auto got = as_map(s.distribution(logits.data(), 4));
    std::set<int32_t> ids;
    double total = 0;
    for (const auto& [id, prob] : got) ids.insert(id), total += prob;
    EXPECT_EQ(ids, c.want) << "min_p " << c.min_p;
    EXPECT_NEAR(total, 1.0, 1e-6);
  }
}

// The chain order: top-k, then top-p on the top-k survivors, then min-p, then temperature.
TEST(Sampler, ChainOrder) {
  // probabilities 0.35 0.25 0.2 0.1 0.1 (ids in order). top_k 4 -> renormalised over 0.9:
  // 0.389 0.278 0.222 0.111; top_p 0.6 keeps ids 0, 1; temperature 2 then flattens those two.
  const std::vector<float> logits = {std::log(0.35f), std::log(0.25f), std::log(0.2f), std::log(0.1f),
                                     std::log(0.1f)};
  SamplingParams p = plain(2.0f);
  p.top_k = 4;
  p.top_p = 0.6f;
  Sampler s(p);
  const auto got = as_map(s.distribution(logits.data(), 5));
  ASSERT_EQ(got.size(), 2u);
  const double a = std::sqrt(0.35), b = std::sqrt(0.25);  // exp(log(p) / 2)
  EXPECT_NEAR(got.at(0), a / (a + b), 1e-6);
  EXPECT_NEAR(got.at(1), b / (a + b), 1e-6);
}

TEST(Sampler, PenaltiesChangeExactlyTheTargetedLogits) {
  std::vector<float> logits = {1.0f, -2.0f, 0.5f, 3.0f, -0.5f, 2.0f, 0.0f, -1.0f};
  SamplingParams p = plain(1.0f);
  p.repeat_penalty = 1.5f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.3f;
  p.repeat_last_n = 4;
  Sampler s(p);
  for (int32_t t : {0, 7, 3, 4, 3, 99}) s.accept(t);  // window (last 4): 4, 3, 3, 99 (out of range)
  std::vector<float> want = logits;
  want[3] = 3.0f / 1.5f - (2 * 0.2f + 0.3f);   // positive: divided; seen twice
  want[4] = -0.5f * 1.5f - (1 * 0.2f + 0.3f);  // negative: multiplied; seen once
  const auto got = as_map(s.distribution(logits.data(), int(logits.size())));
  const auto ref = softmax(want);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got.at(int32_t(i)), ref[i], 1e-6) << i;

  // repeat_last_n = -1: the whole history; 0: no penalties at all.
  p.repeat_last_n = -1;
  Sampler all(p);
  for (int32_t t : {0, 7}) all.accept(t);
  want = logits;
  want[0] = 1.0f / 1.5f - 0.5f;
  want[7] = -1.0f * 1.5f - 0.5f;
  const auto got_all = as_map(all.distribution(logits.data(), int(logits.size())));
  const auto ref_all = softmax(want);
  for (size_t i = 0; i < ref_all.size(); ++i) EXPECT_NEAR(got_all.at(int32_t(i)), ref_all[i], 1e-6) << i;
  p.repeat_last_n = 0;
  Sampler none(p);
  none.accept(3);
  const auto got_none = as_map(none.distribution(logits.data(), int(logits.size())));
  const auto ref_none = softmax(logits);
  for (size_t i = 0; i < ref_none.size(); ++i) EXPECT_NEAR(got_none.at(int32_t(i)), ref_none[i], 1e-6);

  // Greedy sees the penalties too: token 3 drops below token 5.
  SamplingParams g = plain(0.0f);
  g.repeat_penalty = 2.0f;
  Sampler greedy(g);
  EXPECT_EQ(greedy.sample(logits.data(), int(logits.size())), 3);
  greedy.accept(3);
  EXPECT_EQ(greedy.sample(logits.data(), int(logits.size())), 5);
}

TEST(Sampler, LogitBias) {
  const auto logits = random_logits(kVocab, 21);
  const int best = first_argmax(logits);
  SamplingParams p = plain(0.0f);
  p.logit_bias[best] = -INFINITY;
  Sampler greedy(p);
  std::vector<float> rest = logits;
  rest[best] = -INFINITY;
  EXPECT_EQ(greedy.sample(logits.data(), kVocab), first_argmax(rest));

  // Sampling never returns a banned token, even one that would dominate.
  std::vector<float> small = {10.0f, 0.0f, 0.0f, 0.0f};
  SamplingParams q = plain(1.0f);
  q.logit_bias[0] = -INFINITY;
  q.logit_bias[2] = std::log(3.0f);  // token 2 becomes 3x as likely as 1 and 3
  Sampler s(q);
  const auto got = as_map(s.distribution(small.data(), 4));
  EXPECT_EQ(got.count(0), 0u);
  EXPECT_NEAR(got.at(2), 0.6, 1e-6);
  EXPECT_NEAR(got.at(1), 0.2, 1e-6);
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.sample(small.data(), 4), 0);

  SamplingParams bad = plain(1.0f);
  bad.logit_bias[4] = 1.0f;
  Sampler out_of_range(bad);
  EXPECT_THROW(out_of_range.sample(small.data(), 4), std::invalid_argument);
}

TEST(Sampler, NonFiniteLogits) {
  std::vector<float> v = {NAN, -INFINITY, 1.0f, NAN, 0.5f};
  for (float t : {0.0f, 1.0f}) {
    Sampler s(plain(t));
    const auto got = as_map(s.distribution(v.data(), 5));
    EXPECT_EQ(got.count(0) + got.count(1) + got.count(3), 0u);
  }
  std::vector<float> none = {-INFINITY, NAN};
  Sampler s(plain(1.0f));
  EXPECT_THROW(s.sample(none.data(), 2), std::runtime_error);
  Sampler g(plain(0.0f));
  EXPECT_THROW(g.sample(none.data(), 2), std::runtime_error);
  EXPECT_THROW(g.sample(none.data(), 0), std::invalid_argument);
  SamplingParams p;
  p.temperature = NAN;
  EXPECT_THROW(Sampler{p}, std::invalid_argument);
}

TEST(Sampler, SampleFromAndUniform) {
  Sampler s(plain(1.0f));
  std::vector<TokenProb> d = {{5, 0.0f}, {9, 0.25f}, {2, 0.75f}};
  int nine = 0;
  for (int i = 0; i < 4000; ++i) {
    const int32_t t = s.sample_from(d);
    ASSERT_TRUE(t == 9 || t == 2);
    nine += t == 9;
  }
  EXPECT_NEAR(nine / 4000.0, 0.25, 0.03);
  for (int i = 0; i < 1000; ++i) {
    const double u = s.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

// The default chain on a Gemma-sized vocabulary must cost well under a millisecond or so; the bound
// here is loose enough for sanitizer builds and only catches accidental full sorts.
TEST(Sampler, FastOnAFullVocabulary) {
  const auto logits = random_logits(kVocab, 31);
  SamplingParams p;  // defaults: top_k 64, top_p 0.95
  p.repeat_penalty = 1.1f;
  Sampler s(p);
  for (int i = 0; i < 64; ++i) s.accept(i * 7);
  const auto t0 = std::chrono::steady_clock::now();
  const int n = 50;
  for (int i = 0; i < n; ++i) s.sample(logits.data(), kVocab);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
  EXPECT_LT(ms, 25.0);
  std::printf("[ info ] default chain on %d logits: %.3f ms per token\n", kVocab, ms);
}

// ---- StopStringMatcher --------------------------------------------------------------------------

// Feeds `text` in pieces; returns everything emitted (plus the flush when no stop) and the stop.
std::pair<std::string, std::string> run_matcher(const std::vector<std::string>& stops,
                                                const std::string& text, const std::vector<size_t>& cuts) {
  StopStringMatcher m(stops);
  std::string out;
  size_t prev = 0;
  std::vector<size_t> all = cuts;
  all.push_back(text.size());
  for (size_t c : all) {
    const auto r = m.feed(std::string_view(text).substr(prev, c - prev));
    prev = c;
    out += r.text;
    if (r.stopped) {
      EXPECT_TRUE(m.stopped());
      EXPECT_TRUE(m.feed("more").text.empty());
      return {out, r.stop};
    }
  }
  return {out + m.flush(), ""};
}

TEST(StopStringMatcher, HoldsBackOnlyWhatCouldStillBeAStop) {
  StopStringMatcher m({"\n\nUser:"});
  EXPECT_EQ(m.feed("Hello").text, "Hello");
  EXPECT_EQ(m.feed(" world\n").text, " world");
  EXPECT_EQ(m.feed("\nUs").text, "");
  auto r = m.feed("er: hi");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.stop, "\n\nUser:");

  StopStringMatcher n({"abc"});
  EXPECT_EQ(n.feed("xab").text, "x");
  EXPECT_EQ(n.feed("d").text, "abd");  // not a stop after all: released
  EXPECT_EQ(n.feed("ab").text, "");
  EXPECT_EQ(n.flush(), "ab");  // end of generation: held text is released
}

TEST(StopStringMatcher, EdgeCases) {
  using Stops = std::vector<std::string>;
  // Overlapping self-prefix: "aab" inside "aaab".
  EXPECT_EQ(run_matcher(Stops{"aab"}, "aaab", {1, 2, 3}),
            std::make_pair(std::string("a"), std::string("aab")));
  // The stop that completes first wins, whatever started first.
  EXPECT_EQ(run_matcher(Stops{"abcd", "bc"}, "xabcd", {}).second, "bc");
  EXPECT_EQ(run_matcher(Stops{"abcd", "bc"}, "xabcd", {}).first, "xa");
  // Equal ends: the longer one.
  EXPECT_EQ(run_matcher(Stops{"bc", "abc"}, "xabc", {}),
            std::make_pair(std::string("x"), std::string("abc")));
  // Stop at the very start, and a stop spread over many pieces.
  EXPECT_EQ(run_matcher(Stops{"END"}, "END tail", {}), std::make_pair(std::string(""), std::string("END")));
  EXPECT_EQ(run_matcher(Stops{"END"}, "aEND", {1, 2, 3}),
            std::make_pair(std::string("a"), std::string("END")));
  // Empty stop strings are ignored; no stops: everything passes straight through.
  StopStringMatcher none({"", ""});
  EXPECT_TRUE(none.stop_strings().empty());
  EXPECT_EQ(none.feed("abc").text, "abc");
  // Multi-byte stop strings.
  EXPECT_EQ(run_matcher(Stops{"→ stop"}, "go → stop now", {3, 4, 5}),
            std::make_pair(std::string("go "), std::string("→ stop")));
}

TEST(StopStringMatcher, SameResultForEveryWayOfCuttingTheText) {
  const std::vector<std::string> stops = {"abc", "cab", "bb", "aaaa"};
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int len = 1 + int(rng() % 20);
    for (int i = 0; i < len; ++i) text += "abc"[rng() % 3];
    const auto whole = run_matcher(stops, text, {});
    std::vector<size_t> bytes;
    for (size_t c = 1; c < text.size(); ++c) bytes.push_back(c);
    EXPECT_EQ(run_matcher(stops, text, bytes), whole) << text;
    std::vector<size_t> random;
    for (size_t c = 1; c < text.size(); ++c)
      if (rng() % 3 == 0) random.push_back(c);
    EXPECT_EQ(run_matcher(stops, text, random), whole) << text;
    // And the emitted text is a prefix of the input that contains no stop string.
    EXPECT_EQ(text.compare(0, whole.first.size(), whole.first), 0);
    for (const std::string& s : stops) EXPECT_EQ(whole.first.find(s), std::string::npos);
  }
}

}  // namespace
}  // namespace gem4::generate
