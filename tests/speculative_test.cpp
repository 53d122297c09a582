// Speculative decoding (generate/speculative.h) on the trained tiny Gemma 4 and its assistant.
//
// References, none produced by the code under test:
//  - plain greedy decoding (plain_greedy.h: Session::set_tokens/push and an argmax);
//  - tiny-gemma4/README.md: llama.cpp's greedy continuations of three prompts (F32) and its MTP
//    acceptance over spec-prompts.txt (63.5 % at draft-max 1, 41.5 % at draft-max 3);
//  - a fresh Session run on the accepted tokens (KV rollback);
//  - the exact target distribution, computed here with a plain softmax (speculative sampling).
#include "generate/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "generate/drafter_factory.h"
#include "generate/drafter_model.h"
#include "generate/drafter_mtp.h"
#include "generate/drafter_ngram.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "generate/session.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "plain_greedy.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace gem4::generate {
namespace {

struct Tiny {
  std::unique_ptr<Model> target, assistant, q8;
  text::Tokenizer tok;
  std::vector<int32_t> encode(const std::string& s) const { return tok.encode(s, true, false); }
};

Tiny load_tiny() {
  auto target = Model::load(test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
  auto assistant = Model::load(test::testdata("tiny-gemma4/tiny-gemma4-assistant-f32.gguf"));
  auto q8 = Model::load(test::testdata("tiny-gemma4/tiny-gemma4-q8_0.gguf"));
  auto tok = text::Tokenizer::from_gguf(*target->file);
  return Tiny{std::move(target), std::move(assistant), std::move(q8), std::move(tok)};
}

SessionOptions session_options(int ubatch = 64) {
  SessionOptions o;
  o.n_ctx = 512;
  o.ubatch = ubatch;
  o.kv_type = KvType::F32;
  return o;
}

int32_t argmax(const float* x, int n) { return int32_t(std::max_element(x, x + n) - x); }

using test::plain_greedy;

TokenRun run_spec(Session& s, Drafter* d, const std::vector<int32_t>& prompt, int n, int draft_max,
                  const SamplingParams* sampling = nullptr, bool adaptive = false) {
  SpecOptions opt;
  opt.draft_max = draft_max;
  opt.adaptive = adaptive;
  s.speculate(d, opt);
  return generate_tokens(s, prompt, n, sampling);
}

// The engine's decoding step on a Session's sequence, one round at a time, with what the tests read.
class Stepper {
 public:
  Stepper(Session& s, Drafter* d, const SpecOptions& opt) : s_(s) { s_.speculate(d, opt); }
  // Processes the prompt and returns the first token (greedy without sampling parameters).
  int32_t start(const std::vector<int32_t>& prompt, const SamplingParams* sampling = nullptr) {
    Sequence& q = s_.sequence();
    if (sampling) {
      q.sampler.emplace(*sampling);
    } else {
      q.sampler.reset();
    }
    q.sample_after_prompt = true;
    q.keep_hidden = false;
    s_.engine().start(q, prompt);
    s_.engine().prefill(q);
    return q.emitted.at(0);
  }
  const std::vector<int32_t>& step() {
    Sequence* one = &s_.sequence();
    s_.engine().step(std::span<Sequence* const>(&one, 1));
    return s_.sequence().emitted;
  }
  const std::vector<int32_t>& tokens() const { return s_.sequence().tokens; }
  const SpecStats& stats() const { return s_.sequence().stats; }
  const Draft& last_draft() const { return s_.sequence().draft; }
  const ForwardOutputs& last_verify() const { return s_.engine().last_outputs(); }
  std::optional<Sampler>& sampler() { return s_.sequence().sampler; }

 private:
  Session& s_;
};

std::string collapse_ws(const std::string& s) {
  std::istringstream in(s);
  std::string w, out;
  while (in >> w) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

const char* kReadmePrompts[3] = {"In the beginning God created", "And the LORD said unto Moses,", "Blessed are the"};
const char* kReadmeGreedy[3] = {
    "his word; and in the earthquake his words; And said, I will not let the earth be glad, nor be in the earth "
    "beneath, and let the earth be moved. For the earth is full of the heaven",
    "Stretch out thine hand over the waters of the sea; and the waters were as the waters of the seas, and the "
    "waters were as the waters of the seas. And the waters were as the waters in the midst of",
    "man whom the LORD God of Israel hath sent to reproach the LORD his God. And the LORD said unto Moses, Stretch "
    "out thine hand over the land of Egypt for a possession. And the LORD said unto Moses, Stret"};

// --- greedy equivalence -------------------------------------------------------------------------

TEST(Spec, GreedyOutputIsPlainDecodingOnReadmePrompts) {
  Tiny m = load_tiny();
  ThreadPool pool(1);  // decode-sized work: one thread avoids barrier costs on a shared machine
  Session target(*m.target, &pool, session_options());
  auto mtp = make_drafter("mtp", *m.target, {m.assistant.get()}, &pool, session_options());
  auto ngram = make_drafter("ngram", *m.target, {}, &pool, session_options());
  auto both = make_drafter("mtp,ngram", *m.target, {m.assistant.get()}, &pool, session_options());
  for (int i = 0; i < 3; ++i) {
    const auto prompt = m.encode(kReadmePrompts[i]);
    const auto plain = plain_greedy(target, prompt, 48);
    EXPECT_EQ(collapse_ws(m.tok.decode(plain, false)), kReadmeGreedy[i]) << "plain greedy, prompt " << i;
    EXPECT_EQ(run_spec(target, nullptr, prompt, 48, 3).tokens, plain) << "spec none, prompt " << i;
    const TokenRun r = run_spec(target, mtp.get(), prompt, 48, 3);
    EXPECT_EQ(r.tokens, plain) << "spec mtp, prompt " << i;
    EXPECT_GT(r.stats.drafted, 0);
    EXPECT_EQ(run_spec(target, ngram.get(), prompt, 48, 3).tokens, plain) << "spec ngram, prompt " << i;
    EXPECT_EQ(run_spec(target, both.get(), prompt, 48, 3).tokens, plain) << "spec mtp+ngram, prompt " << i;
    EXPECT_EQ(run_spec(target, mtp.get(), prompt, 48, 4, nullptr, true).tokens, plain) << "adaptive, prompt " << i;
    std::printf("[ spec ] prompt %d: mtp draft-max 3 accepted %lld of %lld (%.1f %%)\n", i, (long long)r.stats.accepted,
                (long long)r.stats.drafted, 100 * r.stats.acceptance_rate());
  }
}

// The README's sweep: 24 prompts, 64 tokens, greedy. llama.cpp: 22 of 24 identical (two exact
// near-ties flip in its batched verification), MTP acceptance 63.5 % (draft-max 1), 41.5 % (3).
TEST(Spec, SlowSpecPromptsIdenticalOutputAndMtpAcceptance) {
  Tiny m = load_tiny();
  ThreadPool pool(1);  // decode-sized work: one thread avoids barrier costs on a shared machine
  Session target(*m.target, &pool, session_options());
  const auto prompts = read_lines(test::testdata("tiny-gemma4/spec-prompts.txt"));
  ASSERT_EQ(prompts.size(), 24u);
  auto mtp = make_drafter("mtp", *m.target, {m.assistant.get()}, &pool, session_options());
  auto ngram = make_drafter("ngram", *m.target, {}, &pool, session_options());
  auto both = make_drafter("mtp,ngram", *m.target, {m.assistant.get()}, &pool, session_options());
  struct Config {
    const char* name;
    Drafter* d;
    int draft_max;
    bool adaptive = false;
    int identical = 0;
    SpecStats total;
  };
  std::vector<Config> configs = {{"none", nullptr, 0}, {"mtp dm1", mtp.get(), 1}, {"mtp dm3", mtp.get(), 3},
                                 {"ngram dm3", ngram.get(), 3}, {"mtp+ngram dm3", both.get(), 3},
                                 {"mtp adaptive", mtp.get(), 4, true}};
  double plain_s = 0;
  int plain_tokens = 0;
  for (const std::string& p : prompts) {
    const auto prompt = m.encode(p);
    const auto t0 = std::chrono::steady_clock::now();
    const auto plain = plain_greedy(target, prompt, 64);
    plain_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    plain_tokens += 64;
    for (Config& c : configs) {
      const TokenRun r = run_spec(target, c.d, prompt, 64, c.draft_max, nullptr, c.adaptive);
      c.identical += r.tokens == plain;
      c.total.rounds += r.stats.rounds, c.total.drafted += r.stats.drafted, c.total.accepted += r.stats.accepted;
      c.total.generated += r.stats.generated, c.total.total_s += r.stats.total_s;
      c.total.draft_rounds += r.stats.draft_rounds;
    }
  }
  std::printf("[ spec ] plain greedy loop: %.1f tokens/s\n", plain_tokens / plain_s);
  for (const Config& c : configs)
    std::printf("[ spec ] %-14s identical %2d/24, drafted %5lld, accepted %5lld (%.1f %%), %.2f tokens/round, %.1f tokens/s\n",
                c.name, c.identical, (long long)c.total.drafted, (long long)c.total.accepted,
                100 * c.total.acceptance_rate(), c.total.tokens_per_round(), c.total.tokens_per_s());
  for (const Config& c : configs) EXPECT_GE(c.identical, 22) << c.name;
  EXPECT_GE(configs[1].total.acceptance_rate(), 0.585) << "llama.cpp: 63.5 %";
  EXPECT_GE(configs[2].total.acceptance_rate(), 0.365) << "llama.cpp: 41.5 %";
  EXPECT_EQ(configs[1].total.drafted, configs[1].total.rounds);  // draft-max 1 drafts every round
}

// --- the target side: hidden states only where outputs are --------------------------------------

TEST(Spec, PromptChunksWithoutOutputsSkipTheSharedTail) {
  Tiny m = load_tiny();
  ThreadPool pool(1);  // decode-sized work: one thread avoids barrier costs on a shared machine
  Session target(*m.target, &pool, session_options(8));
  auto mtp = make_drafter("mtp", *m.target, {m.assistant.get()}, &pool, session_options());
  SpecOptions opt;
  opt.draft_max = 3;
  Stepper dec(target, mtp.get(), opt);
  std::vector<int32_t> prompt = m.encode("And God remembered Noah, and every living thing, and all the cattle that was with him in the ark:");
  prompt.resize(30);
  target.forward().stats.reset();
  dec.start(prompt);
  const ForwardStats& st = target.forward().stats;
  const int n_shared = m.target->config.n_kv_shared;
  EXPECT_EQ(st.micro_batches, 4);    // 8 + 8 + 8 + 6 rows
  EXPECT_EQ(st.skipped_tails, 3);    // the three micro-batches without an output row stop at the last K/V write
  EXPECT_EQ(st.tail_rows, n_shared);  // only the last prompt row runs the KV-shared layers
  // A verify round: every row is an output row with logits and a hidden state, nothing else.
  target.forward().stats.reset();
  dec.step();
  const int rows = int(dec.last_draft().tokens.size()) + 1;
  EXPECT_EQ(rows, 4);
  EXPECT_EQ(int(dec.last_verify().logit_rows.size()), rows);
  EXPECT_EQ(int(dec.last_verify().hidden_rows.size()), rows);
  EXPECT_EQ(target.forward().stats.tail_rows, int64_t(rows) * n_shared);
  EXPECT_EQ(target.forward().stats.skipped_tails, 0);
}

// --- KV rollback ------------------------------------------------------------------------------------

// Proposes j correct tokens (from a precomputed greedy continuation) and then wrong ones, j cycling
// 0..3, and records the hidden state it was given.
class ScriptedDrafter : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> truth, int n_vocab) : truth_(std::move(truth)), n_vocab_(n_vocab) {}
  const char* name() const override { return "scripted"; }
  bool needs_hidden() const override { return true; }
  void draft(const DraftRequest& req, Draft& out) override {
    seen_hidden.assign(req.hidden, req.hidden + 256);
    const int n = int(req.tokens->size());  // truth_[n] is the correct next token
    planned = round_++ % 4;
    for (int i = 0; i < req.n_max; ++i) {
      const int32_t t = n + i < int(truth_.size()) ? truth_[n + i] : 0;
      out.tokens.push_back(i < planned ? t : (t + 1 + i) % n_vocab_);
    }
  }
  std::vector<float> seen_hidden;
  int planned = 0;

 private:
  std::vector<int32_t> truth_;
  int n_vocab_;
  int round_ = 0;
};

TEST(Spec, RollbackLeavesTheCacheOfAFreshRun) {
  Tiny m = load_tiny();
  ThreadPool pool(1);  // decode-sized work: one thread avoids barrier costs on a shared machine
  const int ub = 8;  // sliding ring of window + 8 = 72 cells: 100 generated tokens wrap it
  Session target(*m.target, &pool, session_options(ub));
  Session fresh(*m.target, &pool, session_options(64));
  fresh.want_hidden = true;
  const auto prompt = m.encode("Blessed are the");
  const int n_gen = test::quick_mode() ? 60 : 100;
  std::vector<int32_t> truth = prompt;
  {
    const auto cont = plain_greedy(fresh, prompt, n_gen + 8);
    truth.insert(truth.end(), cont.begin(), cont.end());
  }
  ScriptedDrafter drafter(truth, target.n_vocab());
  SpecOptions opt;
  opt.draft_max = ub - 1;
  Stepper dec(target, &drafter, opt);
  dec.start(prompt);
  int rounds = 0;
  double worst_logit = 0, worst_hidden = 0;
  while (int(dec.tokens().size()) < int(prompt.size()) + n_gen) {
    const std::vector<int32_t> before = dec.tokens();
    const auto& emitted = dec.step();
    // Greedy acceptance takes exactly the planned correct prefix, then the target's own token.
    ASSERT_EQ(int(emitted.size()), drafter.planned + 1) << "round " << rounds;
    for (size_t i = 0; i < emitted.size(); ++i) ASSERT_EQ(emitted[i], truth[before.size() + i]);
    // The hidden state the drafter saw is that of a fresh run on the tokens before `last`.
    if (rounds > 0) {
      fresh.set_tokens(std::vector<int32_t>(before.begin(), before.end() - 1));
      worst_hidden = std::max(worst_hidden, test::max_abs_diff(drafter.seen_hidden.data(), fresh.hidden(), 256));
    }
    // Row 0 of this round's verify batch read the cache left by the previous round's rollback:
    // its logits are those of a fresh run on the accepted tokens.
    fresh.set_tokens(before);
    worst_logit = std::max(worst_logit, test::max_rel_diff(dec.last_verify().logits_of(0), fresh.logits(), target.n_vocab()));
    rounds++;
  }
  std::printf("[ spec ] %d rounds with rejections, %d tokens: worst relative logit difference %.2e, hidden %.2e\n",
              rounds, int(dec.tokens().size()), worst_logit, worst_hidden);
  EXPECT_LT(worst_logit, 1e-4);
  EXPECT_LT(worst_hidden, 1e-3);
  EXPECT_EQ(target.kv().seq_len(0), int(dec.tokens().size()) - 1);
}

// --- the classic draft model and the n-gram drafter ---------------------------------------------------

TEST(Spec, DraftModelKeepsItsSessionInStep) {
  Tiny m = load_tiny();
  ThreadPool pool(1);  // decode-sized work: one thread avoids barrier costs on a shared machine
  Session target(*m.target, &pool, session_options());
  auto draft = make_drafter("draft", *m.target, {m.q8.get()}, &pool, session_options());
  for (const char* p : kReadmePrompts) {
    const auto prompt = m.encode(p);
    const auto plain = plain_greedy(target, prompt, 48);
    const TokenRun r = run_spec(target, draft.get(), prompt, 48, 4);
    EXPECT_EQ(r.tokens, plain) << p;
    // The Q8_0 copy of the target drafts nearly every token right.
    EXPECT_GT(r.stats.acceptance_rate(), 0.8) << p;
    std::printf("[ spec ] draft model (Q8_0 of the target), draft-max 4: accepted %lld of %lld\n",
                (long long)r.stats.accepted, (long long)r.stats.drafted);
  }
  EXPECT_THROW(make_drafter("draft", *m.target, {m.assistant.get()}, &pool, session_options()), std::invalid_argument);
  EXPECT_THROW(make_drafter("mtp", *m.target, {m.q8.get()}, &pool, session_options()), std::invalid_argument);
}

TEST(Spec, NgramLookupProposesWhatFollowedTheLongestRecentMatch) {
  std::vector<int32_t> out;
  EXPECT_EQ(ngram_lookup({1, 2, 3, 4, 5, 1, 2, 3}, 1, 3, 3, out), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 5, 1}));
  EXPECT_EQ(ngram_lookup({7, 1, 2, 9, 9, 8, 2}, 1, 3, 5, out), 1);  // only "2" recurs
  EXPECT_EQ(out, (std::vector<int32_t>{9, 9, 8, 2}));
  EXPECT_EQ(ngram_lookup({5, 6, 5, 6, 5, 6}, 1, 3, 2, out), 3);  // the most recent occurrence
  EXPECT_EQ(out, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(ngram_lookup({1, 2, 3}, 1, 3, 4, out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ngram_lookup({1, 2, 3, 1, 2}, 3, 3, 4, out), 0);  // min_n = 3: a 2-token match is not enough
}

TEST(Spec, ParseSpec) {
  EXPECT_EQ(parse_spec("mtp,ngram"), (std::vector<std::string>{"mtp", "ngram"}));
  EXPECT_EQ(parse_spec("MTP + draft"), (std::vector<std::string>{"mtp", "draft"}));
  EXPECT_TRUE(parse_spec("none").empty());
  EXPECT_TRUE(parse_spec("").empty());
  EXPECT_THROW(parse_spec("medusa"), std::invalid_argument);
  EXPECT_THROW(parse_spec("mtp,mtp"), std::invalid_argument);
  EXPECT_THROW(parse_spec("none,mtp"), std::invalid_argument);
}

TEST(Spec, AdaptiveLengthFollowsAcceptanceAndCosts) {
  // Cheap drafts that are always accepted: draft as much as allowed.
  DraftLengthController good(6, true);
  for (int i = 0; i < 50; ++i) {
    const int k = good.next();
    good.record(k, k, 1e-4 * k, 1e-3 * (1 + 0.05 * k));
  }
  EXPECT_EQ(good.next(), 6);
  // Expensive drafts that are always rejected: stop drafting (but for the probe every 16th round).
  DraftLengthController bad(6, true);
  int zeros = 0;
  for (int i = 0; i < 64; ++i) {
    const int k = bad.next();
    zeros += k == 0;
    bad.record(k, 0, 1e-3 * k, 1e-3 * (1 + 0.5 * k));
  }
  EXPECT_GE(zeros, 50);
  EXPECT_LT(bad.acceptance_estimate(), 0.35);
  // Fixed mode ignores measurements.
  DraftLengthController fixed(3, false);
  fixed.record(3, 0, 1, 1);
  EXPECT_EQ(fixed.next(), 3);
}

// --- generate() with speculation: the same contract -----------------------------------------------

TEST(Spec, GenerateSpeculatingMatchesGenerate) {
  Tiny m = load_tiny();
  ThreadPool pool(1);
  auto mtp = make_drafter("mtp", *m.target, {m.assistant.get()}, &pool, session_options());
  auto ngram = make_drafter("ngram", *m.target, {}, &pool, session_options());
  struct Case {
    const char* prompt;
    int max_tokens;
    std::vector<std::string> stop;
    int n_ctx;
  };
  const std::vector<Case> cases = {{"Blessed are the", 48, {"Egypt"}, 512},  // a stop string
                                   {"And the LORD said unto Moses,", 40, {}, 512},
                                   {"In the beginning God created", -1, {}, 30}};  // a full context
  for (const Case& c : cases) {
    GenerateRequest req;
    req.prompt = m.encode(c.prompt);
    req.sampling.temperature = 0;
    req.max_tokens = c.max_tokens;
    req.stop = c.stop;
    SessionOptions so = session_options(8);
    so.n_ctx = c.n_ctx;
    Session plain_s(*m.target, &pool, so);
    const GenerateResult ref = generate(plain_s, m.tok, req);
    for (Drafter* d : {static_cast<Drafter*>(nullptr), mtp.get(), ngram.get()}) {
      Session s(*m.target, &pool, so);
      SpecOptions opt;
      opt.draft_max = 4;
      std::string streamed;
      SpecStats stats;
      s.speculate(d, opt);
      const GenerateResult r = generate(s, m.tok, req, [&](std::string_view piece, int32_t) {
        streamed += piece;
        return true;
      }, &stats);
      const std::string what = std::string(c.prompt) + " / " + (d ? d->name() : "none");
      EXPECT_EQ(r.tokens, ref.tokens) << what;
      EXPECT_EQ(r.text, ref.text) << what;
      EXPECT_EQ(streamed, ref.text) << what;
      EXPECT_EQ(r.stats.stop, ref.stats.stop) << what;
      EXPECT_EQ(r.stats.generated, ref.stats.generated) << what;
      EXPECT_EQ(r.stats.stop_string, ref.stats.stop_string) << what;
      // The session holds the prompt and the reply but its last token, as after plain generate(), so
      // a following turn recomputes nothing of the reply.
      std::vector<int32_t> held = req.prompt;
      held.insert(held.end(), r.tokens.begin(), r.tokens.end() - 1);
      EXPECT_EQ(s.tokens(), held) << what;
      EXPECT_EQ(plain_s.tokens(), held) << what;
      EXPECT_EQ(s.kv().seq_len(0), int(s.tokens().size())) << what;
      if (d) {
        EXPECT_GT(stats.drafted, 0) << what;
      }
    }
  }
}

// --- speculative sampling ----------------------------------------------------------------------------

// Q(a, x), the regularized upper incomplete gamma function (series / continued fraction).
double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double lg = std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - lg);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - lg) * h;
}

struct ChiSquare {
  double stat = 0;
  int df = 0;
  double p = 1;
};

// Pearson's test of observed counts against expected probabilities: cells with an expected count
// below 5 are pooled into one.
ChiSquare chi_square(const std::map<int64_t, int>& observed, const std::map<int64_t, double>& expected, int n) {
  ChiSquare r;
  double kept_mass = 0;
  int kept_obs = 0, cells = 0;
  for (const auto& [cell, pr] : expected) {
    const double e = pr * n;
    if (e < 5) continue;
    auto it = observed.find(cell);
    const int o = it == observed.end() ? 0 : it->second;
    r.stat += (o - e) * (o - e) / e;
    kept_mass += pr;
    kept_obs += o;
    cells++;
  }
  // Everything else, observed or expected, is one pooled cell.
  const double pooled_e = (1 - kept_mass) * n;
  const int pooled_o = n - kept_obs;
  if (pooled_e > 1e-9) {
    r.stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    cells++;
  } else if (pooled_o > 0) {
    r.stat = INFINITY;
  }
  r.df = cells - 1;
  r.p = r.df > 0 ? gamma_q(r.df / 2.0, r.stat / 2.0) : 1.0;
  return r;
}

std::vector<double> softmax(const float* logits, int n) {
  const double mx = *std::max_element(logits, logits + n);
  std::vector<double> p(n);
  double z = 0;
  for (int i = 0; i < n; ++i) z += p[i] = std::exp(double(logits[i]) - mx);
  for (double& x : p) x /= z;
  return p;
}

SamplingParams temperature_one(uint64_t seed) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = seed;
  return sp;
}

// The acceptance rule alone, on small distributions: the output follows p whatever q is.
TEST(Spec, AcceptanceRuleReproducesTheTargetDistribution) {
  Sampler s(temperature_one(5));
  std::mt19937_64 rng(11);
  const std::vector<TokenProb> p = {{0, 0.40f}, {1, 0.25f}, {2, 0.15f}, {3, 0.10f}, {4, 0.10f}};
  const std::vector<std::vector<TokenProb>> qs = {
      {{0, 0.10f}, {1, 0.60f}, {5, 0.30f}},  // overlaps partly, proposes a token p never picks
      {{3, 1.0f}},                           // a point mass on a poor token
      {},                                    // greedy / n-gram style point mass (draft token 0)
      {{0, 0.40f}, {1, 0.25f}, {2, 0.15f}, {3, 0.10f}, {4, 0.10f}}};  // q == p: always accepted
  const int n = 100000;
  for (size_t qi = 0; qi < qs.size(); ++qi) {
    const auto& q = qs[qi];
    std::map<int64_t, int> obs;
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      const int32_t d = q.empty() ? 0 : draw(q, rng);
      int32_t repl = -1;
      const bool ok = accept_or_resample(p, q, d, s.uniform(), s, &repl);
      accepted += ok;
      obs[ok ? d : repl]++;
    }
    std::map<int64_t, double> expected;
    for (const auto& tp : p) expected[tp.id] = tp.p;
    const ChiSquare c = chi_square(obs, expected, n);
    EXPECT_GT(c.p, 1e-4) << "q #" << qi << ": chi2 " << c.stat << " df " << c.df;
    EXPECT_EQ(obs.count(5), 0u) << "a token with p = 0 was emitted";
    if (qi == 3) {
      EXPECT_EQ(accepted, n);
    }
  }
}

// Speculative sampling with the MTP drafter at temperature 1 against the exact target distribution
// (named Slow: about 10 s in Release, minutes under ASan, which runs the smoke test below instead)
// of the first two tokens it produces: the first token t1 after the prompt is greedy (so the
// reference stays small); the next two, (t2, t3), come from one or two verify rounds in which the
// drafter proposed from its own top-10 softmax. P(t2, t3) = p(t2 | prompt t1) p(t3 | prompt t1 t2).
TEST(Spec, SlowSamplingKeepsTheTargetDistribution) {
  Tiny m = load_tiny();
  ThreadPool pool(1);  // decode-sized work: one thread avoids barrier costs on a shared machine
  Session target(*m.target, &pool, session_options(16));
  Session ref(*m.target, &pool, session_options(16));
  auto mtp = make_drafter("mtp", *m.target, {m.assistant.get()}, &pool, session_options());
  const int V = target.n_vocab();
  const auto prompt = m.encode("And the LORD said unto Moses,");
  const int n = 2500;

  // Exact reference.
  std::vector<int32_t> ctx = prompt;
  ref.set_tokens(ctx);
  const int32_t t1 = argmax(ref.logits(), V);
  ctx.push_back(t1);
  ref.set_tokens(ctx);
  const std::vector<double> p2 = softmax(ref.logits(), V);
  std::map<int64_t, double> expected_pair, expected_t2;
  for (int a = 0; a < V; ++a) {
    expected_t2[a] = p2[a];
    if (p2[a] * n < 5) continue;  // its pairs are pooled anyway
    std::vector<int32_t> c2 = ctx;
    c2.push_back(a);
    ref.set_tokens(c2);
    const std::vector<double> p3 = softmax(ref.logits(), V);
    for (int b = 0; b < V; ++b)
      if (p2[a] * p3[b] * n >= 5) expected_pair[int64_t(a) * V + b] = p2[a] * p3[b];
  }

  SpecOptions opt;
  opt.draft_max = 2;
  opt.seed = 99;
  Stepper dec(target, mtp.get(), opt);
  std::map<int64_t, int> obs_pair, obs_t2, obs_draft;
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(dec.start(prompt), t1);
    dec.sampler().emplace(temperature_one(1000 + i));
    std::vector<int32_t> got;
    bool first_round = true;
    while (got.size() < 2) {
      const auto& e = dec.step();
      if (first_round && !dec.last_draft().tokens.empty()) obs_draft[dec.last_draft().tokens[0]]++;
      first_round = false;
      got.insert(got.end(), e.begin(), e.end());
    }
    drafted += dec.stats().drafted, accepted += dec.stats().accepted;
    obs_pair[int64_t(got[0]) * V + got[1]]++;
    obs_t2[got[0]]++;
  }
  const ChiSquare pair = chi_square(obs_pair, expected_pair, n);
  const ChiSquare single = chi_square(obs_t2, expected_t2, n);
  const ChiSquare control = chi_square(obs_draft, expected_t2, n);
  std::printf("[ spec ] %d sampled runs, %.1f %% of drafts accepted: (t2, t3) chi2 %.1f, df %d, p = %.3f; t2 chi2 %.1f, "
              "df %d, p = %.3f; the drafter's own proposals: chi2 %.0f, p = %.1e\n",
              n, 100.0 * accepted / std::max<int64_t>(1, drafted), pair.stat, pair.df, pair.p, single.stat, single.df,
              single.p, control.stat, control.p);
  EXPECT_GT(pair.p, 1e-3);
  EXPECT_GT(single.p, 1e-3);
  EXPECT_GT(pair.df, 5);
  EXPECT_GT(accepted, 0);
  // The test can tell distributions apart: the drafts themselves (drawn from q) fail it.
  EXPECT_LT(control.p, 1e-6);
}

// Sampling with a truncating sampler chain, penalties and combined drafters runs and keeps its
// bookkeeping straight (the distribution itself is checked by the Slow test above).
TEST(Spec, SampledGenerationSmoke) {
  Tiny m = load_tiny();
  ThreadPool pool(1);
  Session target(*m.target, &pool, session_options(8));
  for (const char* spec : {"mtp", "mtp,ngram", "ngram", "draft"}) {
    auto d = make_drafter(spec, *m.target, {m.assistant.get(), m.q8.get()}, &pool, session_options());
    SamplingParams sp;
    sp.temperature = 0.9f;
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.repeat_penalty = 1.1f;
    sp.seed = 3;
    SpecOptions opt;
    opt.draft_max = 3;
    opt.seed = 5;
    target.speculate(d.get(), opt);
    const TokenRun r = generate_tokens(target, m.encode("And God remembered Noah, and every"), 40, &sp);
    ASSERT_EQ(r.tokens.size(), 40u) << spec;
    for (int32_t t : r.tokens) EXPECT_TRUE(t >= 0 && t < target.n_vocab()) << spec;
    EXPECT_GT(r.stats.drafted, 0) << spec;
    EXPECT_LE(r.stats.accepted, r.stats.drafted) << spec;
    EXPECT_GE(r.stats.generated, int64_t(r.tokens.size())) << spec;
    // Afterwards the session holds the prompt and the tokens but the last.
    EXPECT_EQ(int(target.tokens().size()), int(m.encode("And God remembered Noah, and every").size() + 39)) << spec;
    EXPECT_EQ(target.kv().seq_len(0), int(target.tokens().size())) << spec;
    ASSERT_TRUE(target.sequence().sampler.has_value()) << spec;
    EXPECT_FALSE(target.sequence().sampler->history().empty()) << spec;
  }
}

}  // namespace
}  // namespace gem4::generate
