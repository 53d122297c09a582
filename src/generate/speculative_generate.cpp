#include "generate/speculative_generate.h"

#include <chrono>
#include <stdexcept>

namespace gem4::generate {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

GenerateResult generate_speculative(Session& session, const text::Tokenizer& tokenizer, const GenerateRequest& req,
                                    Drafter* drafter, const SpecOptions& opt, const OnPiece& on_piece,
                                    SpecStats* spec_stats) {
  if (req.prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  check_context(int(req.prompt.size()), session.n_ctx());
  Sampler sampler(req.sampling);  // validates the parameters before any work
  TextStream stream(tokenizer, req.stop, req.special_text);
  SpeculativeDecoder dec(session, drafter, opt);

  GenerateResult res;
  GenerateStats& st = res.stats;
  const auto t_start = Clock::now();
  st.prompt_tokens = int(req.prompt.size());
  // Penalties look at the prompt too, as in generate(); start() samples the first token.
  for (int32_t t : req.prompt) sampler.accept(t);
  std::vector<int32_t> pending = {dec.start(req.prompt, &sampler)};
  st.prompt_processed = dec.prompt_processed();
  st.prompt_reused = st.prompt_tokens - st.prompt_processed;
  st.prompt_s = seconds_since(t_start);

  const auto t_gen = Clock::now();
  auto emit = [&](std::string text, int32_t token) {
    res.text += text;
    return !on_piece || on_piece(text, token);
  };
  bool cancelled = false, done = false;
  st.stop = StopReason::Length;
  while (!done) {
    for (int32_t token : pending) {
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
    if (done || dec.room() < 0) break;  // no room for the last token: "length"
    pending = dec.step(&sampler);
  }
  if (cancelled) {
    st.stop = StopReason::Cancelled;
  } else if (st.stop != StopReason::StopString) {
    std::string rest = stream.finish();
    if (stream.stopped()) {
      st.stop = StopReason::StopString;
      st.stop_string = stream.stop_string();
    }
    if (!rest.empty() && !emit(std::move(rest), -1)) st.stop = StopReason::Cancelled;
  }
  st.generation_s = seconds_since(t_gen);
  dec.release();
  if (spec_stats) *spec_stats = dec.stats();
  return res;
}

}  // namespace gem4::generate
