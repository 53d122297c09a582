// One generation request in flight between an HTTP thread and the engine thread.
//
// The HTTP thread builds a GenerationRequest (tokens, limits, sampling), submits the Job to the
// scheduler and then waits on it; the engine thread fills it with events (text deltas, prompt
// progress, the final usage). Cancellation goes the other way: a client that disconnects cancels its
// Job and the engine frees the slot at its next step.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "generate/constraint.h"
#include "generate/media_span.h"
#include "generate/sampler.h"
#include "text/output_parser.h"

namespace gem4::server {

enum class FinishReason { kStop, kLength, kToolCalls, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // OpenAI's spelling: "stop", "length", "tool_calls", ...

struct GenerationRequest {
  std::vector<int32_t> prompt;  // every token of the prompt (BOS included when wanted)
  int max_tokens = 1;           // generated-token limit (> 0); the caller checked it fits the context
  generate::SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings, matched on the generated text
  // Chat: split the text into reasoning, content and tool calls (text::OutputParser).
  bool parse_output = false;
  // Text the prompt already put in the model's mouth (a forced tool call "<|tool_call>call:NAME{");
  // the output parser reads it before the first generated token.
  std::string assistant_prefix;
  std::string tool_call_id_prefix = "call_";
  bool report_progress = false;  // emit prompt-progress events while the prompt is processed
  // response_format json_object / json_schema: the grammar the completion follows (null: none).
  std::shared_ptr<generate::GrammarConstraint> constraint;
  // Soft-token spans of the prompt (image_url parts): generate/media_span.h.
  std::vector<generate::MediaSpan> media;
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose K/V were reused (a slot, the prefix store, the disk)
  // Speculative decoding: drafted tokens the target accepted, and those it rejected.
  int accepted_prediction_tokens = 0;
  int rejected_prediction_tokens = 0;
};

struct GenerationEvent {
  enum class Kind { kDelta, kProgress, kDone };
  Kind kind = Kind::kDelta;
  text::OutputDelta delta;  // kDelta (content only, unless parse_output)
  // kProgress: prompt tokens whose K/V exist (cached + processed) out of the total.
  int progress_done = 0, progress_total = 0, progress_cached = 0;
  double progress_ms = 0;
  // kDone
  FinishReason finish = FinishReason::kStop;
  Usage usage;
  std::string error;  // FinishReason::kError: what went wrong
};

class Job {
 public:
  explicit Job(GenerationRequest request) : request_(std::move(request)) {}

  const GenerationRequest& request() const { return request_; }
  std::chrono::steady_clock::time_point queued_at;  // set by Scheduler::submit

  // HTTP side.
  void cancel() { cancelled_.store(true); }
  // Waits up to `timeout` for events and takes all of them (empty on timeout).
  std::vector<GenerationEvent> take(std::chrono::milliseconds timeout);
  // Waits up to `timeout` for the first event, taking nothing; true once one is there.
  bool wait_for_event(std::chrono::milliseconds timeout);

  // Engine side.
  bool cancelled() const { return cancelled_.load(); }
  void push(GenerationEvent e);
  bool done() const { return done_.load(); }

 private:
  GenerationRequest request_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> events_;
};

}  // namespace gem4::server
