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
// Each slot is a generate::Sequence and every step is generate::Engine::step, the decoding step of
// gem4 run and chat: with --spec each generating slot drafts and its verify rows [last, d1..dk] go
// into the same batch as the other slots' rows and the prompt chunk. Prompts reuse cached prefixes:
// a slot's own cells, another slot's (server/prefix_cache.h picks the slot), the prefix store's
// chunks (prefixes the sliding rings moved past) and the prompt cache on disk. Sampling, stop strings,
// detokenization and output parsing happen on the engine thread, which pushes text deltas to each Job.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "generate/engine.h"
#include "generate/prefix_store.h"
#include "generate/prompt_cache_file.h"
#include "generate/speculative.h"
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
  // Speculative decoding per slot: a --spec value ("none", "mtp", "ngram", "mtp+ngram", "draft") and
  // the -md models it reads (they must outlive the scheduler).
  std::string spec = "none";
  std::vector<const Model*> draft_models;
  generate::SpecOptions spec_opt;
  size_t prefix_store_bytes = 256u << 20;  // --cache-ram (0: no prefix store)
  std::string prompt_cache_dir;            // --prompt-cache ("" : none)
  uint64_t prompt_cache_bytes = 4096ull << 20;
  // --max-queue: requests that may wait for a slot; try_submit refuses more (0: no bound).
  int max_queue = 0;
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
  // As submit, unless max_queue requests already wait for a slot: then false, and the job is not
  // queued (the HTTP front answers 429). A request that finds a free slot never counts as waiting.
  bool try_submit(std::shared_ptr<Job> job);
  // Ends the engine thread; jobs still queued or running end with FinishReason::kError.
  void stop();

  SchedulerState state() const;
  int n_ctx() const { return opt_.n_ctx; }
  int slots() const { return opt_.slots; }
  int max_queue() const { return opt_.max_queue; }

 private:
  struct Slot;
  void engine_loop();
  void admit(std::shared_ptr<Job> job);
  void step();
  void take_tokens(Slot& s);
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
  std::unique_ptr<generate::PrefixStore> store_;
  std::unique_ptr<generate::PromptCacheDir> disk_;
  generate::Engine engine_;
  std::vector<std::unique_ptr<Slot>> slots_;  // touched by the engine thread only
  uint64_t clock_ = 0;                        // admission / use order

  mutable std::mutex mu_;  // guards queue_, stopping_, busy_, kv_used_, store_stats_, disk_*
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  int busy_ = 0;
  int64_t kv_used_ = 0;
  generate::PrefixStoreStats store_stats_;
  int64_t disk_entries_ = 0;
  uint64_t disk_bytes_ = 0;
  std::thread thread_;  // the engine thread
};

}  // namespace gem4::server
