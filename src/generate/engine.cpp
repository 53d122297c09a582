#include "generate/engine.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "generate/prompt_cache_file.h"

namespace gem4::generate {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int common_prefix(const int32_t* a, int na, const std::vector<int32_t>& b) {
  const int n = std::min(na, int(b.size()));
  int i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}
}  // namespace

const char* prefix_source_name(PrefixSource s) {
  switch (s) {
    case PrefixSource::None:
      return "none";
    case PrefixSource::Own:
      return "own";
    case PrefixSource::OtherSequence:
      return "other";
    case PrefixSource::Store:
      return "store";
    case PrefixSource::Disk:
      return "disk";
  }
  return "?";
}

void Sequence::speculate(Drafter* drafter, const SpecOptions& opt, int max_ubatch) {
  if (opt.draft_max < 0) throw std::invalid_argument("--draft-max must not be negative");
  drafter_ = drafter;
  length_ = DraftLengthController(drafter ? std::min(opt.draft_max, max_ubatch - 1) : 0, opt.adaptive);
  rng.seed(opt.seed ^ 0x9e3779b97f4a7c15ull);
}

Engine::Engine(Forward& forward, KvCache& kv, PrefixStore* store, PromptCacheDir* disk)
    : forward_(forward), kv_(kv), store_(store), disk_(disk) {}

StartInfo Engine::start(Sequence& seq, const std::vector<int32_t>& prompt, std::span<Sequence* const> others,
                        const std::vector<MediaSpan>& media) {
  if (prompt.empty()) throw std::invalid_argument("empty prompt");
  if (int(prompt.size()) > kv_.n_ctx())
    throw std::invalid_argument("the prompt needs " + std::to_string(prompt.size()) +
                                " tokens of context but the context holds " + std::to_string(kv_.n_ctx()));
  const int limit = int(prompt.size()) - 1;  // the last token is recomputed for its logits
  const int d = forward_.config().d_model;
  for (const MediaSpan& m : media)
    if (m.count <= 0 || m.first < 0 || m.first + m.count > limit || !m.embd ||
        m.embd->size() != size_t(m.count) * d)
      throw std::invalid_argument("a media span at position " + std::to_string(m.first) +
                                  " does not fit the prompt or the model's width (" + std::to_string(d) + ")");
  StartInfo info;
  // 1. The sequence's own cells, where the rings can roll back that far (and its media agree).
  const int own = std::min(common_prefix(seq.cached(), seq.n_cached, prompt), limit);
  const int held = media_common_prefix(seq.media, media, own);
  const Sequence* donor = nullptr;
  if (held > 0 && kv_.can_truncate(seq.id, held)) info = {held, PrefixSource::Own, 0};
  // 2. Another sequence of the same cache (read only; copied in).
  for (const Sequence* o : others) {
    if (!o || o == &seq) continue;
    const int c =
        media_common_prefix(o->media, media, std::min(common_prefix(o->cached(), o->n_cached, prompt), limit));
    if (c > info.reused && kv_.can_truncate(o->id, c)) info = {c, PrefixSource::OtherSequence, 0}, donor = o;
  }
  // 3. Chunks in memory, then 4. chunks on disk (loaded into the store, then restored from it); both
  // keyed on the media's content too (media_keyed_tokens).
  int from_store = 0;
  const std::vector<int32_t> keyed =
      media.empty() ? std::vector<int32_t>() : media_keyed_tokens(prompt, media);
  const std::vector<int32_t>& key = media.empty() ? prompt : keyed;
  if (store_) {
    const int C = store_->chunk_tokens();
    if (info.reused / C < limit / C) from_store = store_->resumable(kv_, seq.id, key, limit, held);
    if (disk_ && from_store / C < limit / C && (info.reused / C) < limit / C) {
      const int best = std::max(from_store, info.reused);
      // Only an entry that gives more than the memory already does is read.
      const int n = disk_->load(
          key, limit / C, [&](int i, const uint8_t* rows) { store_->insert(key, i, rows); }, nullptr,
          best / C);
      if (n * C > best) {
        const int p = store_->resumable(kv_, seq.id, key, limit, held);
        if (p > from_store) from_store = p, info.disk_tokens = p;
      }
    }
  }
  if (from_store > info.reused) {
    store_->restore(kv_, seq.id, key, from_store, held);
    info.reused = from_store;
    info.source = info.disk_tokens > 0 ? PrefixSource::Disk : PrefixSource::Store;
  } else if (info.source == PrefixSource::OtherSequence) {
    kv_.copy_prefix(donor->id, seq.id, info.reused);
    info.disk_tokens = 0;
  } else {
    kv_.truncate(seq.id, info.reused);
    info.disk_tokens = 0;
  }
  seq.tokens = prompt;
  seq.media = media;
  seq.n_cached = info.reused;
  seq.generating = false;
  seq.emitted.clear();
  seq.logits.clear();
  seq.hidden.clear();
  seq.stats = SpecStats();
  if (seq.sampler && seq.penalize_prompt)
    for (int32_t t : prompt) seq.sampler->accept(t);
  if (seq.constraint) seq.constraint->reset();  // the grammar applies to what is generated next
  return info;
}

int32_t Engine::choose(Sequence& seq, const float* logits) {
  const int V = out_.n_vocab;
  // A grammar masks the logits before the sampler chain and advances with the chosen token.
  if (seq.constraint) logits = seq.constraint->apply(logits, V);
  int32_t t;
  if (!seq.sampler) {
    t = argmax_token(logits, V);
  } else {
    t = seq.sampler->sample(logits, V);
    seq.sampler->accept(t);
  }
  if (seq.constraint) seq.constraint->accept(t);
  return t;
}

void Engine::clear(Sequence& seq) {
  kv_.clear(seq.id);
  seq.tokens.clear();
  seq.media.clear();
  seq.n_cached = 0;
  seq.generating = false;
  seq.emitted.clear();
  seq.hidden.clear();
}

void Engine::keep(Sequence& seq, int n) {
  n = std::clamp(n, 0, int(seq.tokens.size()));
  if (n >= int(seq.tokens.size())) return;
  if (n == 0) return clear(seq);
  // The first n - 1 tokens stay cached; token n - 1 becomes the unfed `last`.
  if (seq.constraint) seq.constraint->rollback(int(seq.tokens.size()) - n);
  seq.tokens.resize(n);
  if (seq.n_cached > n - 1) {
    kv_.truncate(seq.id, n - 1);  // at most one step's accepted drafts: within the rings' spare cells
    seq.n_cached = n - 1;
  }
  seq.hidden.clear();  // the hidden state belonged to the dropped last token
}

void Engine::finish(Sequence& seq) {
  seq.tokens.resize(seq.n_cached);
  seq.generating = false;
  seq.hidden.clear();
}

void Engine::prefill(Sequence& seq) {
  while (seq.prefilling()) step({}, &seq, std::min(seq.prompt_left(), forward_.ubatch));
}

void Engine::save_prompt(const Sequence& seq, int n_prompt) {
  if (!disk_ || !store_) return;
  const int C = store_->chunk_tokens();
  const int n = std::min(n_prompt, seq.n_cached) / C;
  // Whole chunks present in the store, from the first (keyed as the store keys them).
  std::vector<int32_t> prefix = seq.media.empty() ? seq.tokens : media_keyed_tokens(seq.tokens, seq.media);
  prefix.resize(std::min<size_t>(prefix.size(), size_t(n) * C));
  int have = 0;
  while (have < n && store_->find(prefix, have)) ++have;
  if (have == 0) return;
  disk_->save(prefix, have, [&](int i, uint8_t* dst) {
    const uint8_t* rows = store_->find(prefix, i);
    std::copy(rows, rows + store_->chunk_bytes(), dst);
  });
}

void Engine::step(std::span<Sequence* const> decoding, Sequence* prefill, int prefill_rows) {
  const auto t0 = Clock::now();
  batch_.clear();
  struct Part {
    Sequence* seq;
    int first_row, n_before;
    double draft_s;
  };
  std::vector<Part> parts;
  parts.reserve(decoding.size());
  for (Sequence* s : decoding) {
    if (!s->generating || s->n_cached + 1 != int(s->tokens.size()))
      throw std::logic_error("Engine::step: sequence " + std::to_string(s->id) + " is not generating");
    const int n = int(s->tokens.size());
    if (n > kv_.n_ctx())
      throw std::length_error("the context of " + std::to_string(kv_.n_ctx()) + " tokens is full");
    const auto td = Clock::now();
    s->draft.clear();
    const int k = std::min({s->length().next(), kv_.n_ctx() - n, kv_.max_ubatch() - 1});
    if (s->drafter() && k > 0) {
      DraftRequest req;
      req.tokens = &s->tokens;
      req.hidden = s->hidden.empty() ? nullptr : s->hidden.data();
      req.target_kv = &kv_;
      req.seq = s->id;
      req.n_max = k;
      const float temperature = s->sampler ? s->sampler->params().temperature : 0.0f;
      req.temperature = temperature > 0 ? temperature : 0.0f;
      req.rng = &s->rng;
      s->drafter()->draft(req, s->draft);
      if (int(s->draft.tokens.size()) > k) s->draft.tokens.resize(k);
    }
    const int kd = int(s->draft.tokens.size());
    parts.push_back({s, int(batch_.size()), n, seconds(td, Clock::now())});
    const bool hidden = s->wants_hidden();
    for (int i = 0; i <= kd; ++i) {
      const int32_t tok = i == 0 ? s->tokens.back() : s->draft.tokens[i - 1];
      batch_.push_back({tok, int32_t(n - 1 + i), int32_t(s->id), true, hidden});
    }
  }
  int pre_first = int(batch_.size());
  bool pre_ends = false;
  if (prefill) {
    prefill_rows = std::clamp(prefill_rows, 0, prefill->prompt_left());
    // An image is decoded in one pass: a chunk ends before it, or takes the rest of it.
    const int begin = prefill->n_cached;
    for (const MediaSpan& m : prefill->media) {
      const int end = begin + prefill_rows;
      if (!m.bidirectional || end <= m.first || end >= m.first + m.count) continue;
      prefill_rows = m.first > begin ? m.first - begin : m.first + m.count - begin;
    }
    pre_ends = prefill_rows == prefill->prompt_left();
    const bool hidden = prefill->wants_hidden();
    for (int i = 0; i < prefill_rows; ++i) {
      const int pos = prefill->n_cached + i;
      const bool last = pre_ends && i + 1 == prefill_rows;
      batch_.push_back({prefill->tokens[pos], int32_t(pos), int32_t(prefill->id), last, last && hidden});
      for (size_t k = 0; k < prefill->media.size(); ++k) {
        const MediaSpan& m = prefill->media[k];
        if (pos < m.first || pos >= m.first + m.count) continue;
        const size_t d = m.embd->size() / size_t(m.count);
        batch_.back().embd = m.embd->data() + size_t(pos - m.first) * d;
        batch_.back().span = m.bidirectional ? int32_t(k) : -1;
      }
    }
  }
  if (batch_.empty()) return;

  const auto t1 = Clock::now();
  out_.clear();
  try {
    forward_.run(batch_, kv_, out_);
  } catch (...) {
    for (const Part& p : parts) clear(*p.seq);
    if (prefill) clear(*prefill);
    throw;
  }
  const auto t2 = Clock::now();
  const double verify_s = seconds(t1, t2);

  for (const Part& p : parts) accept_verify(*p.seq, p.first_row, p.n_before, p.draft_s, verify_s);
  for (const Part& p : parts) p.seq->stats.total_s += seconds(t0, Clock::now());

  if (prefill && prefill_rows > 0) {
    Sequence& s = *prefill;
    const int before = s.n_cached;
    s.n_cached += prefill_rows;
    s.emitted.clear();
    if (store_)
      store_->record(kv_, s.id, s.media.empty() ? s.tokens : media_keyed_tokens(s.tokens, s.media), before);
    if (pre_ends) {
      const int row = pre_first + prefill_rows - 1;
      const float* logits = out_.logits_of(row);
      if (!logits) throw std::logic_error("Engine::step: no logits for the prompt's last row");
      if (s.wants_hidden()) {
        const float* h = out_.hidden_of(row);
        s.hidden.assign(h, h + out_.d_model);
      }
      if (s.sample_after_prompt) {
        const int32_t first = choose(s, logits);
        s.tokens.push_back(first);
        s.generating = true;
        s.emitted.push_back(first);
        s.stats.generated++;
      } else {
        s.logits.assign(logits, logits + out_.n_vocab);
      }
    }
    const double secs = seconds(t0, Clock::now());
    s.stats.prompt_s += secs;
    s.stats.total_s += secs;
  }
}

// Step 3-4 of a round (generate/speculative.h): accept the longest passing prefix of the draft, then
// one more token; roll the rejected rows back.
void Engine::accept_verify(Sequence& s, int first_row, int n, double draft_s, double verify_s) {
  const int V = out_.n_vocab;
  const int kd = int(s.draft.tokens.size());
  Sampler* sampler = s.sampler ? &*s.sampler : nullptr;
  const bool greedy = !sampler || sampler->params().temperature <= 0;
  int a = 0;
  int32_t next = -1;
  // With a grammar every row is masked in the grammar state after the drafts accepted so far: a
  // draft the grammar rejects has logit -inf, so it fails and the constrained choice replaces it
  // (greedy output stays that of plain constrained decoding).
  GrammarConstraint* constraint = s.constraint.get();
  for (; a < kd; ++a) {
    const float* row = out_.logits_of(first_row + a);
    if (constraint) row = constraint->apply(row, V);
    const int32_t d = s.draft.tokens[a];
    if (!sampler) {
      const int32_t t = argmax_token(row, V);
      if (t != d) {
        next = t;
        break;
      }
      if (constraint) constraint->accept(d);
      continue;
    }
    const std::vector<TokenProb> p = sampler->distribution(row, V);
    bool ok;
    int32_t repl = -1;
    if (greedy) {
      ok = !p.empty() && p.front().id == d;
      if (!ok) repl = p.empty() ? argmax_token(row, V) : p.front().id;
    } else {
      static const std::vector<TokenProb> kPointMass;
      const std::vector<TokenProb>& q = a < int(s.draft.q.size()) ? s.draft.q[a] : kPointMass;
      ok = accept_or_resample(p, q, d, sampler->uniform(), *sampler, &repl);
    }
    if (!ok) {
      next = repl;
      break;
    }
    sampler->accept(d);
    if (constraint) constraint->accept(d);
  }
  if (a == kd) {
    const float* row = out_.logits_of(first_row + kd);
    if (constraint) row = constraint->apply(row, V);
    next = sampler ? sampler->sample(row, V) : argmax_token(row, V);
  }
  if (sampler) sampler->accept(next);
  if (constraint) constraint->accept(next);

  kv_.truncate(s.id, n + a);
  s.n_cached = n + a;
  s.emitted.assign(s.draft.tokens.begin(), s.draft.tokens.begin() + a);
  s.emitted.push_back(next);
  s.tokens.insert(s.tokens.end(), s.emitted.begin(), s.emitted.end());
  if (s.wants_hidden()) {
    const float* h = out_.hidden_of(first_row + a);
    s.hidden.assign(h, h + out_.d_model);
  }
  if (store_)
    store_->record(kv_, s.id, s.media.empty() ? s.tokens : media_keyed_tokens(s.tokens, s.media), n - 1);
  s.length().record(kd, a, draft_s, verify_s);
  s.stats.rounds++;
  s.stats.drafted += kd;
  s.stats.accepted += a;
  s.stats.draft_rounds += kd > 0 ? 1 : 0;
  s.stats.generated += int64_t(s.emitted.size());
  s.stats.draft_s += draft_s;
  s.stats.verify_s += verify_s;
}

}  // namespace gem4::generate
