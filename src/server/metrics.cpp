#include "server/metrics.h"

#include <cstdio>

namespace gem4::server {

void Metrics::count_request(const std::string& path, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_[{path, status}]++;
}

void Metrics::count_step(int prompt_rows, int decode_rows, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  steps_++;
  const int rows = prompt_rows + decode_rows;
  if (rows <= 0) return;
  prompt_tokens_processed_ += prompt_rows;
  decode_rows_ += decode_rows;
  prompt_seconds_ += seconds * prompt_rows / rows;
  generation_seconds_ += seconds * decode_rows / rows;
}

void Metrics::count_generated(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  generated_tokens_ += n;
}

void Metrics::count_prompt(int n_prompt, int n_cached) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += n_prompt;
  prompt_tokens_cached_ += n_cached;
}

void Metrics::count_speculation(int64_t drafted, int64_t accepted) {
  std::lock_guard<std::mutex> lock(mu_);
  drafted_ += uint64_t(drafted);
  accepted_ += uint64_t(accepted);
}

void Metrics::count_prefix_source(const std::string& source, int tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& e = prefix_sources_[source];
  e.first++;
  e.second += uint64_t(tokens);
}

void Metrics::count_finished(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  (ok ? generations_ok_ : generations_failed_)++;
}

void Metrics::count_rejected() {
  std::lock_guard<std::mutex> lock(mu_);
  rejected_++;
}

void Metrics::count_queue_wait(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  waits_++;
  wait_seconds_ += seconds;
  for (size_t i = 0; i < kWaitBounds.size(); ++i)
    if (seconds <= kWaitBounds[i]) wait_buckets_[i]++;
}

namespace {

// Label values escape backslash, double quote and newline.
std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const char* name, double value, const std::string& labels = "") {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += std::string(" ") + buf + "\n";
}

}  // namespace

std::string Metrics::prometheus(const SchedulerState& s) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  metric(out, "gem4_http_requests_total", "counter", "HTTP requests answered, by path and status code.");
  for (const auto& [key, n] : requests_)
    sample(out, "gem4_http_requests_total", double(n),
           "path=\"" + label_value(key.first) + "\",status=\"" + std::to_string(key.second) + "\"");
  metric(out, "gem4_generations_total", "counter",
         "Generation requests that reached the engine, by outcome.");
  sample(out, "gem4_generations_total", double(generations_ok_), "outcome=\"ok\"");
  sample(out, "gem4_generations_total", double(generations_failed_), "outcome=\"failed\"");
  metric(out, "gem4_prompt_tokens_total", "counter",
         "Prompt tokens of admitted requests (cached ones included).");
  sample(out, "gem4_prompt_tokens_total", double(prompt_tokens_));
  metric(out, "gem4_prompt_tokens_cached_total", "counter",
         "Prompt tokens whose K/V were reused from a slot.");
  sample(out, "gem4_prompt_tokens_cached_total", double(prompt_tokens_cached_));
  metric(out, "gem4_prompt_tokens_processed_total", "counter", "Prompt tokens run through the model.");
  sample(out, "gem4_prompt_tokens_processed_total", double(prompt_tokens_processed_));
  metric(out, "gem4_generated_tokens_total", "counter", "Tokens generated (sampled).");
  sample(out, "gem4_generated_tokens_total", double(generated_tokens_));
  metric(out, "gem4_prompt_seconds_total", "counter", "Engine time spent on prompt tokens.");
  sample(out, "gem4_prompt_seconds_total", prompt_seconds_);
  metric(out, "gem4_generation_seconds_total", "counter", "Engine time spent on decode tokens.");
  sample(out, "gem4_generation_seconds_total", generation_seconds_);
  metric(out, "gem4_prompt_tokens_per_second", "gauge",
         "Prompt throughput: processed prompt tokens / prompt time.");
  sample(out, "gem4_prompt_tokens_per_second",
         prompt_seconds_ > 0 ? prompt_tokens_processed_ / prompt_seconds_ : 0);
  metric(out, "gem4_generation_tokens_per_second", "gauge",
         "Generation throughput: decode tokens / decode time.");
  sample(out, "gem4_generation_tokens_per_second",
         generation_seconds_ > 0 ? decode_rows_ / generation_seconds_ : 0);
  metric(out, "gem4_engine_steps_total", "counter", "Batched forward passes run by the engine.");
  sample(out, "gem4_engine_steps_total", double(steps_));
  metric(out, "gem4_requests_queued", "gauge", "Requests waiting for a free slot.");
  sample(out, "gem4_requests_queued", s.queued);
  metric(out, "gem4_queue_capacity", "gauge",
         "Requests that may wait for a slot (--max-queue; 0: no bound).");
  sample(out, "gem4_queue_capacity", s.max_queue);
  metric(out, "gem4_requests_rejected_total", "counter",
         "Generation requests refused with 429: the queue was full.");
  sample(out, "gem4_requests_rejected_total", double(rejected_));
  metric(out, "gem4_queue_wait_seconds", "histogram", "Time from a request's arrival to its slot.");
  for (size_t i = 0; i < kWaitBounds.size(); ++i) {
    char le[32];
    std::snprintf(le, sizeof le, "le=\"%g\"", kWaitBounds[i]);
    sample(out, "gem4_queue_wait_seconds_bucket", double(wait_buckets_[i]), le);
  }
  sample(out, "gem4_queue_wait_seconds_bucket", double(waits_), "le=\"+Inf\"");
  sample(out, "gem4_queue_wait_seconds_sum", wait_seconds_);
  sample(out, "gem4_queue_wait_seconds_count", double(waits_));
  metric(out, "gem4_ready", "gauge", "1 once the model is loaded and the server takes requests.");
  sample(out, "gem4_ready", s.ready ? 1 : 0);
  metric(out, "gem4_slots_busy", "gauge", "Slots generating.");
  sample(out, "gem4_slots_busy", s.slots_busy);
  metric(out, "gem4_slots_total", "gauge", "Slots (parallel sequences).");
  sample(out, "gem4_slots_total", s.slots);
  metric(out, "gem4_kv_cache_used_cells", "gauge", "Positions held in the KV cache, summed over slots.");
  sample(out, "gem4_kv_cache_used_cells", double(s.kv_cells_used));
  metric(out, "gem4_kv_cache_usage_ratio", "gauge", "Used positions / (context * slots).");
  sample(out, "gem4_kv_cache_usage_ratio",
         s.kv_cells_total > 0 ? double(s.kv_cells_used) / s.kv_cells_total : 0);
  metric(out, "gem4_kv_cache_bytes", "gauge", "Bytes allocated for K/V.");
  sample(out, "gem4_kv_cache_bytes", double(s.kv_bytes));
  metric(out, "gem4_draft_tokens_total", "counter", "Tokens proposed by speculative drafters.");
  sample(out, "gem4_draft_tokens_total", double(drafted_));
  metric(out, "gem4_draft_tokens_accepted_total", "counter", "Drafted tokens the target accepted.");
  sample(out, "gem4_draft_tokens_accepted_total", double(accepted_));
  metric(out, "gem4_prefix_reuse_total", "counter",
         "Prompts that reused a cached prefix, by where it came from.");
  for (const auto& [src, v] : prefix_sources_)
    sample(out, "gem4_prefix_reuse_total", double(v.first), "source=\"" + src + "\"");
  metric(out, "gem4_prefix_reuse_tokens_total", "counter", "Prompt tokens reused, by where they came from.");
  for (const auto& [src, v] : prefix_sources_)
    sample(out, "gem4_prefix_reuse_tokens_total", double(v.second), "source=\"" + src + "\"");
  metric(out, "gem4_prefix_store_bytes", "gauge", "Bytes of K/V chunks kept to resume past prefixes.");
  sample(out, "gem4_prefix_store_bytes", double(s.store_bytes));
  metric(out, "gem4_prefix_store_budget_bytes", "gauge", "Byte budget of the prefix store (--cache-ram).");
  sample(out, "gem4_prefix_store_budget_bytes", double(s.store_budget));
  metric(out, "gem4_prefix_store_chunks", "gauge", "K/V chunks in the prefix store.");
  sample(out, "gem4_prefix_store_chunks", double(s.store_chunks));
  metric(out, "gem4_prefix_store_evicted_total", "counter", "Chunks dropped from the prefix store (LRU).");
  sample(out, "gem4_prefix_store_evicted_total", double(s.store_evicted));
  metric(out, "gem4_prompt_cache_entries", "gauge", "Entries in the --prompt-cache folder.");
  sample(out, "gem4_prompt_cache_entries", double(s.disk_entries));
  metric(out, "gem4_prompt_cache_bytes", "gauge", "Bytes in the --prompt-cache folder.");
  sample(out, "gem4_prompt_cache_bytes", double(s.disk_bytes));
  return out;
}

}  // namespace gem4::server
