// The generation loop of gem4 run / chat: one request on one Session, driven by the engine's
// decoding step (generate/engine.h), the step the server's slots use too. The prompt reuses a cached
// prefix; each step emits one token, or several with speculation (Session::speculate). Each emitted
// token is handled in order (end-of-generation ids, stop strings, max_tokens, a full context,
// cancellation): its text goes through a StreamingDetokenizer (whole UTF-8 characters only) and a
// StopStringMatcher (never part of a stop string), so every piece handed to the caller is final and
// well-formed. Greedy output is the same with and without speculation.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "generate/constraint.h"
#include "generate/sampler.h"
#include "generate/session.h"
#include "generate/speculative.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace gem4::generate {

// A prompt longer than the session's context. Message: "prompt of N tokens does not fit the context of M".
class ContextLengthError : public std::length_error {
 public:
  ContextLengthError(int n_prompt, int n_ctx);
  int n_prompt, n_ctx;
};

// Throws ContextLengthError when n_prompt > n_ctx (a prompt that fills the context exactly still
// gets one generated token: its logits exist, there is just no room to push it).
void check_context(int n_prompt, int n_ctx);

struct GenerateRequest {
  std::vector<int32_t> prompt;     // token ids, BOS included if wanted (nothing is added)
  SamplingParams sampling;         // temperature <= 0: greedy
  int max_tokens = -1;             // < 0: until end of generation or a full context
  std::vector<std::string> stop;   // stop strings (matched on the decoded text; not emitted)
  bool stop_at_eog = true;         // end at the tokenizer's end-of-generation ids (not emitted)
  std::vector<int32_t> stop_ids;   // also end at these ids (emitted; for token-only runs)
  bool use_sampler = true;         // false: plain argmax, no sampler chain (benchmarks, tests)
  bool special_text = false;       // write CONTROL tokens out as text (<turn|>); USER_DEFINED always are
  // A grammar the completion must follow (null: none); reset at the start of the request.
  std::shared_ptr<GrammarConstraint> constraint;
  // Soft-token spans of the prompt (images, audio): generate/media_span.h.
  std::vector<MediaSpan> media;
};

enum class StopReason { Eog, StopString, Length, Cancelled };
const char* stop_reason_name(StopReason r);  // "eog", "stop", "length", "cancelled"

struct GenerateStats {
  int prompt_tokens = 0;     // length of the request's prompt
  int prompt_processed = 0;  // of those, run through the model
  int prompt_reused = 0;     // of those, already in the session's cache
  int generated = 0;         // tokens sampled (an ending EOG token included)
  double prompt_s = 0;       // prefill
  double generation_s = 0;   // from the end of prefill to the end (sampling and decode steps)
  double ttft_s = 0;         // from the call to the first sampled token
  StopReason stop = StopReason::Length;
  std::string stop_string;   // the stop string that matched (StopReason::StopString)
  double prompt_tokens_per_s() const { return prompt_s > 0 ? prompt_processed / prompt_s : 0.0; }
  double generation_tokens_per_s() const { return generation_s > 0 ? generated / generation_s : 0.0; }
};

struct GenerateResult {
  std::string text;              // everything emitted (the concatenation of the pieces)
  std::vector<int32_t> tokens;   // every sampled token, an ending EOG included
  GenerateStats stats;
};

// Receives each piece of text as it becomes final: once per sampled token (`token`; the text is
// often empty while a character or a possible stop string is held back) and once at the end with
// what the end of the stream released (token = -1; only if non-empty). An ending EOG token and a
// completed stop string produce no call. Returning false cancels the generation.
using OnPiece = std::function<bool(std::string_view text, int32_t token)>;

// Token ids -> text safe to show. Used by generate() and by loops that emit several tokens per step
// (speculative decoding).
class TextStream {
 public:
  TextStream(const text::Tokenizer& tokenizer, std::vector<std::string> stop_strings, bool special_text);
  // Text that `token` made final. After a stop string completed, returns "" for every token.
  std::string push(int32_t token);
  // End of the stream: releases held-back text (an unfinished character as U+FFFD, a partial stop
  // string as text). Returns "" after a stop.
  std::string finish();
  bool stopped() const { return matcher_.stopped(); }
  const std::string& stop_string() const { return stop_; }

 private:
  text::StreamingDetokenizer detok_;
  StopStringMatcher matcher_;
  std::string stop_;
};

// Runs `req` on `session` (speculating if Session::speculate gave it a drafter). The session ends
// holding the prompt and the generated tokens except the last one sampled (whose logits were never
// needed), so a following chat turn recomputes nothing of the reply. Throws ContextLengthError for a
// prompt that does not fit, std::invalid_argument for an empty prompt or bad sampling parameters.
// spec_stats, when given, receives the sequence's drafting statistics.
GenerateResult generate(Session& session, const text::Tokenizer& tokenizer, const GenerateRequest& req,
                        const OnPiece& on_piece = {}, SpecStats* spec_stats = nullptr);

// Greedy (argmax) or sampled tokens without text: n_predict tokens (fewer at an id in `stop_ids`,
// which is kept, or a full context) for benchmarks and tests: generate() without a tokenizer.
struct TokenRun {
  std::vector<int32_t> tokens;
  SpecStats stats;
};
TokenRun generate_tokens(Session& session, const std::vector<int32_t>& prompt, int n_predict,
                         const SamplingParams* sampling = nullptr, const std::vector<int32_t>& stop_ids = {});

}  // namespace gem4::generate
