#include "generate/session.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gem4 {

namespace {
std::unique_ptr<generate::PrefixStore> make_store(const KvCache& kv, size_t bytes) {
  if (bytes == 0) return nullptr;
  return std::make_unique<generate::PrefixStore>(kv, bytes);
}
}  // namespace

Session::Session(const Model& model, ThreadPool* pool, const SessionOptions& opt)
    : model_(model),
      kv_(model.config, opt.n_ctx, 1, opt.ubatch, opt.kv_type),
      forward_(model, pool),
      store_(make_store(kv_, opt.prefix_store_bytes)),
      engine_(forward_, kv_, store_.get()),
      seq_(0) {
  forward_.ubatch = opt.ubatch;
  forward_.switches = opt.switches;
}

void Session::speculate(generate::Drafter* drafter, const generate::SpecOptions& opt) {
  seq_.speculate(drafter, opt, kv_.max_ubatch());
}

void Session::reset() {
  engine_.clear(seq_);
  seq_.logits.clear();
}

// Scoring rather than generating: keep the last logits, sample nothing, no penalties.
void Session::run_prompt() {
  seq_.sample_after_prompt = false;
  seq_.sampler.reset();
  seq_.logits.clear();
  seq_.hidden.clear();
  seq_.keep_hidden = want_hidden;
  engine_.prefill(seq_);
}

void Session::truncate(int n) {
  n = std::clamp(n, 0, int(seq_.tokens.size()));
  if (seq_.generating) engine_.finish(seq_);
  if (n >= seq_.n_cached) return;
  if (!kv_.can_truncate(seq_.id, n)) {
    // The sliding windows no longer hold what position n needs: recompute the kept prefix.
    std::vector<int32_t> keep(seq_.tokens.begin(), seq_.tokens.begin() + n);
    reset();
    if (!keep.empty()) append(keep);
    return;
  }
  kv_.truncate(seq_.id, n);
  seq_.tokens.resize(n);
  seq_.n_cached = n;
  seq_.logits.clear();
  seq_.hidden.clear();
}

int Session::set_tokens(const std::vector<int32_t>& tokens, const std::vector<generate::MediaSpan>& media) {
  if (tokens.empty()) throw std::invalid_argument("empty prompt");
  if (seq_.generating) engine_.finish(seq_);
  seq_.sampler.reset();
  const generate::StartInfo info = engine_.start(seq_, tokens, {}, media);
  run_prompt();
  return int(tokens.size()) - info.reused;
}

int Session::append(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) return 0;
  if (seq_.generating) engine_.finish(seq_);
  const int start = seq_.n_cached;
  if (start + int(tokens.size()) > kv_.n_ctx())
    throw std::invalid_argument("the prompt needs " + std::to_string(start + tokens.size()) +
                                " tokens of context but the context holds " + std::to_string(kv_.n_ctx()));
  seq_.tokens.resize(start);
  seq_.tokens.insert(seq_.tokens.end(), tokens.begin(), tokens.end());
  run_prompt();
  return int(tokens.size());
}

}  // namespace gem4
