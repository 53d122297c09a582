#include "generate/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

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

namespace {

// The loop of generate(); without a tokenizer there is no text and no end-of-generation id.
GenerateResult run(Session& session, const text::Tokenizer* tokenizer, const GenerateRequest& req,
                   const OnPiece& on_piece, SpecStats* spec_stats) {
  if (req.prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  check_context(int(req.prompt.size()), session.n_ctx());
  Sequence& seq = session.sequence();
  Engine& engine = session.engine();
  Sequence* const self = &seq;
  if (req.use_sampler) {
    seq.sampler.emplace(req.sampling);  // validates the parameters before any work
  } else {
    seq.sampler.reset();
  }
  seq.sample_after_prompt = true;
  seq.keep_hidden = false;
  seq.constraint = req.constraint;
  std::optional<TextStream> stream;
  if (tokenizer) stream.emplace(*tokenizer, req.stop, req.special_text);

  GenerateResult res;
  GenerateStats& st = res.stats;
  const auto t_start = Clock::now();
  st.prompt_tokens = int(req.prompt.size());
  st.prompt_reused = engine.start(seq, req.prompt, {}, req.media).reused;
  st.prompt_processed = st.prompt_tokens - st.prompt_reused;
  engine.prefill(seq);  // ends with the first token sampled
  st.prompt_s = seconds_since(t_start);
  engine.save_prompt(seq, st.prompt_tokens);

  const auto t_gen = Clock::now();
  auto emit = [&](std::string text, int32_t token) {
    res.text += text;
    return !on_piece || on_piece(text, token);
  };
  auto is_stop_id = [&](int32_t t) { return std::find(req.stop_ids.begin(), req.stop_ids.end(), t) != req.stop_ids.end(); };
  bool cancelled = false, done = false;
  st.stop = StopReason::Length;
  while (!done) {
    for (int32_t token : seq.emitted) {
      res.tokens.push_back(token);
      if (++st.generated == 1) st.ttft_s = seconds_since(t_start);
      if (tokenizer && req.stop_at_eog && tokenizer->is_eog(token)) {
        st.stop = StopReason::Eog;
        done = true;
        break;
      }
      if (!emit(stream ? stream->push(token) : std::string(), token)) {
        cancelled = done = true;
        break;
      }
      if (stream && stream->stopped()) {
        st.stop = StopReason::StopString;
        st.stop_string = stream->stop_string();
        done = true;
        break;
      }
      if (is_stop_id(token)) {
        st.stop = StopReason::Eog;
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
  } else if (stream && st.stop != StopReason::StopString) {
    std::string rest = stream->finish();
    if (stream->stopped()) {  // the held-back tail completed a stop string only at the very end
      st.stop = StopReason::StopString;
      st.stop_string = stream->stop_string();
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

}  // namespace

GenerateResult generate(Session& session, const text::Tokenizer& tokenizer, const GenerateRequest& req,
                        const OnPiece& on_piece, SpecStats* spec_stats) {
  return run(session, &tokenizer, req, on_piece, spec_stats);
}

TokenRun generate_tokens(Session& session, const std::vector<int32_t>& prompt, int n_predict,
                         const SamplingParams* sampling, const std::vector<int32_t>& stop_ids) {
  TokenRun r;
  if (n_predict <= 0) return r;
  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = n_predict;
  req.stop_ids = stop_ids;
  req.use_sampler = sampling != nullptr;
  if (sampling) req.sampling = *sampling;
  GenerateResult g = run(session, nullptr, req, {}, &r.stats);
  r.tokens = std::move(g.tokens);
  return r;
}

}  // namespace gem4::generate
