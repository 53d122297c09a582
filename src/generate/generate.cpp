#include "generate/generate.h"

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
                        const OnPiece& on_piece) {
  if (req.prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  check_context(int(req.prompt.size()), session.n_ctx());
  Sampler sampler(req.sampling);  // validates the parameters before any work
  TextStream stream(tokenizer, req.stop, req.special_text);

  GenerateResult res;
  GenerateStats& st = res.stats;
  const auto t_start = Clock::now();
  st.prompt_tokens = int(req.prompt.size());
  st.prompt_processed = session.set_tokens(req.prompt);
  st.prompt_reused = st.prompt_tokens - st.prompt_processed;
  st.prompt_s = seconds_since(t_start);
  // Penalties look at the prompt too (as llama.cpp's samplers do); the sampler keeps only its window.
  for (int32_t t : req.prompt) sampler.accept(t);

  const auto t_gen = Clock::now();
  auto emit = [&](std::string text, int32_t token) {
    res.text += text;
    return !on_piece || on_piece(text, token);
  };
  bool cancelled = false;
  st.stop = StopReason::Length;
  while (req.max_tokens < 0 || st.generated < req.max_tokens) {
    const int32_t token = sampler.sample(session.logits(), session.n_vocab());
    sampler.accept(token);
    res.tokens.push_back(token);
    if (++st.generated == 1) st.ttft_s = seconds_since(t_start);
    if (req.stop_at_eog && tokenizer.is_eog(token)) {
      st.stop = StopReason::Eog;
      break;
    }
    std::string piece = stream.push(token);
    if (!emit(std::move(piece), token)) {
      cancelled = true;
      break;
    }
    if (stream.stopped()) {
      st.stop = StopReason::StopString;
      st.stop_string = stream.stop_string();
      break;
    }
    if (req.max_tokens >= 0 && st.generated >= req.max_tokens) break;
    if (int(session.tokens().size()) >= session.n_ctx()) break;  // no room to push it: "length"
    session.push(token);
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
  return res;
}

}  // namespace gem4::generate
