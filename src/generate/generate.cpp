#include "generate/generate.h"

#include <algorithm>
#include <chrono>

namespace gem4::generate {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

ContextLengthError::ContextLengthError(int n_prompt, int n_ctx)
    : std::length_error("prompt of " + std::to_string(n_prompt) + " tokens does not fit the context of " +
                        std::to_string(n_ctx)),
      n_prompt(n_prompt),
      n_ctx(n_ctx) {}

void check_context(int n_prompt, int n_ctx) {
  if (n_prompt > n_ctx) throw ContextLengthError(n_prompt, n_ctx);
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Eog: return "eog";
    case StopReason::StopString: return "stop";
    case StopReason::Length: return "length";
    case StopReason::Cancelled: return "cancelled";
  }
  return "?";
}

TextStream::TextStream(const text::Tokenizer& tokenizer, std::vector<std::string> stop_strings, bool special_text)
    : detok_(tokenizer, special_text), matcher_(std::move(stop_strings)) {}

std::string TextStream::push(int32_t token) {
  if (matcher_.stopped()) return {};
  auto r = matcher_.feed(detok_.push(token));
  if (r.stopped) stop_ = r.stop;
  return std::move(r.text);
}

std::string TextStream::finish() {
  if (matcher_.stopped()) return {};
  auto r = matcher_.feed(detok_.flush());
  if (r.stopped) {
    stop_ = r.stop;
    return std::move(r.text);
  }
  return r.text + matcher_.flush();
}

GenerateResult generate(Session& session, const text::Tokenizer& tokenizer, const GenerateRequest& req,
                        const OnPiece& on_piece, SpecStats* spec_stats) {
  if (req.prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  check_context(int(req.prompt.size()), session.n_ctx());
  Sequence& seq = session.sequence();
  Engine& engine = session.engine();
  Sequence* const self = &seq;
  seq.sampler.emplace(req.sampling);  // validates the parameters before any work
  seq.sample_after_prompt = true;
  seq.keep_hidden = false;
  TextStream stream(tokenizer, req.stop, req.special_text);

  GenerateResult res;
  GenerateStats& st = res.stats;
  const auto t_start = Clock::now();
  st.prompt_tokens = int(req.prompt.size());
  st.prompt_reused = engine.start(seq, req.prompt).reused;
  st.prompt_processed = st.prompt_tokens - st.prompt_reused;
  engine.prefill(seq);  // ends with the first token sampled
  st.prompt_s = seconds_since(t_start);
  engine.save_prompt(seq, st.prompt_tokens);

  const auto t_gen = Clock::now();
  auto emit = [&](std::string text, int32_t token) {
    res.text += text;
    return !on_piece || on_piece(text, token);
  };
  bool cancelled = false, done = false;
  st.stop = StopReason::Length;
  while (!done) {
    for (int32_t token : seq.emitted) {
      res.tokens.push_back(token);
      if (++st.generated == 1) st.ttft_s = seconds_since(t_start);
      if (req.stop_at_eog && tokenizer.is_eog(token)) {
        st.stop = StopReason::Eog;
        done = true;
        break;
      }
      if (!emit(stream.push(token), token)) {
        cancelled = done = true;
        break;
      }
      if (stream.stopped()) {
        st.stop = StopReason::StopString;
        st.stop_string = stream.stop_string();
        done = true;
        break;
      }
      if (req.max_tokens >= 0 && st.generated >= req.max_tokens) {
        done = true;
        break;
      }
    }
    // No room to feed the last token: "length".
    if (done || int(seq.tokens.size()) > session.n_ctx()) break;
    engine.step(std::span<Sequence* const>(&self, 1));
  }
  if (cancelled) {
    st.stop = StopReason::Cancelled;
  } else if (st.stop != StopReason::StopString) {
    std::string rest = stream.finish();
    if (stream.stopped()) {  // the held-back tail completed a stop string only at the very end
      st.stop = StopReason::StopString;
      st.stop_string = stream.stop_string();
    }
    if (!rest.empty() && !emit(std::move(rest), -1)) st.stop = StopReason::Cancelled;
  }
  st.generation_s = seconds_since(t_gen);
  // Tokens a step emitted past the end are forgotten; the last one handled stays unfed.
  engine.keep(seq, st.prompt_tokens + st.generated);
  engine.finish(seq);
  if (spec_stats) *spec_stats = seq.stats;
  return res;
}

TokenRun generate_tokens(Session& session, const std::vector<int32_t>& prompt, int n_predict,
                         const SamplingParams* sampling, const std::vector<int32_t>& stop_ids) {
  TokenRun r;
  if (n_predict <= 0) return r;
  Sequence& seq = session.sequence();
  Engine& engine = session.engine();
  Sequence* const self = &seq;
  if (sampling) {
    seq.sampler.emplace(*sampling);
  } else {
    seq.sampler.reset();
  }
  seq.sample_after_prompt = true;
  seq.keep_hidden = false;
  engine.start(seq, prompt);
  engine.prefill(seq);
  auto is_stop = [&](int32_t t) { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); };
  bool stopped = false;
  for (;;) {
    for (int32_t t : seq.emitted) {
      r.tokens.push_back(t);
      if (is_stop(t) || int(r.tokens.size()) >= n_predict) {
        stopped = true;
        break;
      }
    }
    if (stopped || int(seq.tokens.size()) > session.n_ctx()) break;
    engine.step(std::span<Sequence* const>(&self, 1));
  }
  engine.keep(seq, int(prompt.size() + r.tokens.size()));
  engine.finish(seq);
  r.stats = seq.stats;
  return r;
}

}  // namespace gem4::generate
