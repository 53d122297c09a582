// The generation engine of the server: N slots, one engine thread, continuous batching.
//
// Each slot is one sequence of a shared KvCache (n_seq = slots). Every engine step runs ONE forward
// pass over a Batch made of
//   - the pending token of every slot that is generating (one row each, with logits), and
//   - a chunk of at most one prompt still being processed (the oldest), sized so that the whole
//     batch fits one micro-batch (<= ubatch rows); only the prompt's last token asks for logits, so
//     the pruned plan drops the other chunk rows after the last K/V-owning layer.
// A long prompt therefore delays the others' next token by one chunk at most, and a new request
// starts as soon as a slot is free instead of waiting for a whole batch to end.
//
// Prompts reuse cached prefixes (server/prefix_cache.h). Sampling, stop strings, detokenization
// and output parsing happen on the engine thread, which pushes text deltas to each Job.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "server/job.h"
#include "server/metrics.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace gem4::server {

struct SchedulerOptions {
  int slots = 1;
  int n_ctx = 4096;  // per slot
  int ubatch = 512;  // rows per engine step
  KvType kv_type = KvType::F16;
  PlanSwitches switches;
  int threads = 1;  // compute threads of the forward pass
};

class Scheduler {
 public:
  // Starts the engine thread. Throws std::invalid_argument for impossible options.
  Scheduler(const Model& model, const text::Tokenizer& tokenizer, const SchedulerOptions& opt,
            Metrics* metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job; the engine picks it up when a slot is free. After stop() the job ends at once
  // with FinishReason::kError.
  void submit(std::shared_ptr<Job> job);
  // Ends the engine thread; jobs still queued or running end with FinishReason::kError.
  void stop();

  SchedulerState state() const;
  int n_ctx() const { return opt_.n_ctx; }
  int slots() const { return opt_.slots; }

 private:
  struct Slot;
  void engine_loop();
  void admit(std::shared_ptr<Job> job);
  void step();
  void sample_and_emit(Slot& s, const float* logits);
  void emit_text(Slot& s, const std::string& text);
  void finish(Slot& s, FinishReason reason, const std::string& error = "");
  void release(Slot& s);

  const Model& model_;
  text::Tokenizer tokenizer_;
  SchedulerOptions opt_;
  Metrics* metrics_;
  ThreadPool pool_;
  KvCache kv_;
  Forward forward_;
  ForwardOutputs out_;
  std::vector<std::unique_ptr<Slot>> slots_;  // touched by the engine thread only
  uint64_t clock_ = 0;                        // admission / use order

  mutable std::mutex mu_;  // guards queue_, stopping_, busy_, kv_used_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  int busy_ = 0;
  int64_t kv_used_ = 0;
  std::thread engine_;
};

}  // namespace gem4::server
