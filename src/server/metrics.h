// Server counters, exported at GET /metrics in the Prometheus text format (version 0.0.4).
// The engine thread counts tokens and engine time; HTTP threads count requests.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gem4::server {

// A snapshot of the scheduler, taken when /metrics is read.
struct SchedulerState {
  int slots = 0;
  int slots_busy = 0;
  int queued = 0;
  int max_queue = 0;           // --max-queue (0: no bound)
  bool ready = true;           // false while the model loads
  int64_t kv_cells_used = 0;   // positions held, summed over slots
  int64_t kv_cells_total = 0;  // n_ctx * slots
  size_t kv_bytes = 0;
  // The prefix store (K/V chunks of past prefixes) and the prompt cache on disk.
  size_t store_bytes = 0, store_budget = 0;
  int64_t store_chunks = 0, store_evicted = 0, store_restores = 0;
  int64_t disk_entries = 0;
  uint64_t disk_bytes = 0;
};

class Metrics {
 public:
  // Upper bounds (seconds) of the queue-wait histogram's buckets; +Inf is implied.
  static constexpr std::array<double, 10> kWaitBounds = {0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

  void count_request(const std::string& path, int status);
  // Engine: one step processed `prompt_rows` prompt tokens and `decode_rows` decode tokens in
  // `seconds`; the time is split between the two in proportion to the rows.
  void count_step(int prompt_rows, int decode_rows, double seconds);
  void count_generated(int n);
  void count_prompt(int n_prompt, int n_cached);
  void count_finished(bool ok);
  // Speculative decoding: one verify round drafted `drafted` tokens, `accepted` of them passed.
  void count_speculation(int64_t drafted, int64_t accepted);
  // Where a prompt's reused prefix came from ("own", "other", "store", "disk").
  void count_prefix_source(const std::string& source, int tokens);

  // Backpressure: a request refused because the queue was full (429), and the time an admitted
  // request waited for its slot.
  void count_rejected();
  void count_queue_wait(double seconds);

  std::string prometheus(const SchedulerState& s) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (path, status) -> count
  uint64_t steps_ = 0;
  uint64_t prompt_tokens_ = 0;         // prompt tokens of admitted requests
  uint64_t prompt_tokens_cached_ = 0;  // of which reused from the cache
  uint64_t prompt_tokens_processed_ = 0;
  uint64_t generated_tokens_ = 0;
  uint64_t decode_rows_ = 0;
  double prompt_seconds_ = 0, generation_seconds_ = 0;
  uint64_t generations_ok_ = 0, generations_failed_ = 0;
  uint64_t drafted_ = 0, accepted_ = 0;
  uint64_t rejected_ = 0;
  std::vector<uint64_t> wait_buckets_ = std::vector<uint64_t>(kWaitBounds.size(), 0);  // cumulative counts
  uint64_t waits_ = 0;
  double wait_seconds_ = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> prefix_sources_;  // source -> (prompts, tokens)
};

}  // namespace gem4::server
