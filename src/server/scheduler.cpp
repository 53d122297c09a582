#include "server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "generate/drafter_factory.h"
#include "generate/generate.h"
#include "generate/sampler.h"
#include "server/prefix_cache.h"
#include "text/output_parser.h"

namespace gem4::server {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
}  // namespace

struct Scheduler::Slot {
  explicit Slot(int id) : seq(id) {}
  generate::Sequence seq;  // its cells, token history, sampler and drafter state
  std::unique_ptr<generate::Drafter> drafter;
  uint64_t last_used = 0;

  // The request being served (null when idle) and its progress.
  std::shared_ptr<Job> job;
  uint64_t admitted = 0;  // admission order: the oldest prompt is processed first
  int n_prompt = 0;
  int reused = 0;     // prompt tokens whose K/V were reused
  int taken = 0;      // emitted tokens handled (an ending EOG included)
  int generated = 0;  // of those, reported as completion tokens
  Clock::time_point t_admit;
  std::optional<generate::TextStream> stream;
  std::optional<text::OutputParser> parser;

  const GenerationRequest& req() const { return job->request(); }
  bool prefilling() const { return job && seq.prefilling(); }
  bool decoding() const { return job && seq.generating; }
};

Scheduler::Scheduler(const Model& model, const text::Tokenizer& tokenizer, const SchedulerOptions& opt,
                     Metrics* metrics)
    : model_(model),
      tokenizer_(tokenizer),
      opt_(opt),
      metrics_(metrics),
      pool_(std::max(1, opt.threads)),
      // The sliding rings hold ubatch positions more than a micro-batch needs, so a slot's prefix stays
      // reusable after rolling back up to ubatch tokens (a regenerated answer, an edited last turn).
      kv_(model.config, opt.n_ctx, std::max(1, opt.slots), 2 * std::max(1, opt.ubatch), opt.kv_type),
      forward_(model, &pool_),
      store_(opt.prefix_store_bytes > 0 ? std::make_unique<generate::PrefixStore>(kv_, opt.prefix_store_bytes)
                                        : nullptr),
      engine_(forward_, kv_, store_.get()) {
  if (opt.slots < 1) throw std::invalid_argument("--parallel must be >= 1");
  if (opt.ubatch < 1) throw std::invalid_argument("--ubatch must be >= 1");
  if (opt.n_ctx < 2) throw std::invalid_argument("--ctx must be >= 2");
  forward_.ubatch = opt.ubatch;
  forward_.switches = opt.switches;
  if (!opt.prompt_cache_dir.empty()) {
    if (!store_) throw std::invalid_argument("--prompt-cache needs --cache-ram above 0");
    if (!model.file) throw std::invalid_argument("--prompt-cache needs a model file");
    generate::PromptCacheKey key;
    key.model_id = generate::model_file_identity(*model.file);
    key.layout = kv_.layout_signature();
    key.chunk_tokens = store_->chunk_tokens();
    key.chunk_bytes = store_->chunk_bytes();
    disk_ = std::make_unique<generate::PromptCacheDir>(opt.prompt_cache_dir, key, opt.prompt_cache_bytes);
    engine_.set_disk(disk_.get());
    for (const auto& e : disk_->list()) disk_entries_++, disk_bytes_ += e.bytes;
  }
  SessionOptions draft_opt;  // a draft model's own session (--spec draft)
  draft_opt.n_ctx = opt.n_ctx;
  draft_opt.ubatch = opt.ubatch;
  draft_opt.kv_type = opt.kv_type;
  draft_opt.switches = opt.switches;
  for (int i = 0; i < opt.slots; ++i) {
    auto slot = std::make_unique<Slot>(i);
    slot->drafter = generate::make_drafter(opt.spec, model, opt.draft_models, &pool_, draft_opt);
    slot->seq.speculate(slot->drafter.get(), opt.spec_opt, kv_.max_ubatch());
    slots_.push_back(std::move(slot));
  }
  thread_ = std::thread([this] { engine_loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      job->queued_at = Clock::now();
      queue_.push_back(std::move(job));
      cv_.notify_all();
      return;
    }
  }
  GenerationEvent e;
  e.kind = GenerationEvent::Kind::kDone;
  e.finish = FinishReason::kError;
  e.error = "the server is shutting down";
  job->push(std::move(e));
}

bool Scheduler::try_submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Jobs the engine has not taken yet while slots are free are about to start, not waiting.
    const int waiting = int(queue_.size()) - std::max(0, opt_.slots - busy_);
    if (!stopping_ && opt_.max_queue > 0 && waiting >= opt_.max_queue) {
      if (metrics_) metrics_->count_rejected();
      return false;
    }
  }
  submit(std::move(job));
  return true;
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerState Scheduler::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerState s;
  s.slots = opt_.slots;
  s.slots_busy = busy_;
  s.queued = int(queue_.size());
  s.max_queue = opt_.max_queue;
  s.kv_cells_used = kv_used_;
  s.kv_cells_total = int64_t(opt_.n_ctx) * opt_.slots;
  s.kv_bytes = kv_.bytes();
  s.store_bytes = store_stats_.bytes;
  s.store_budget = store_stats_.budget;
  s.store_chunks = store_stats_.chunks;
  s.store_evicted = store_stats_.evicted;
  s.store_restores = store_stats_.restores;
  s.disk_entries = disk_entries_;
  s.disk_bytes = disk_bytes_;
  return s;
}

void Scheduler::engine_loop() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> admitted;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || busy_ > 0 || !queue_.empty(); });
      if (stopping_) break;
      while (!queue_.empty() && busy_ < opt_.slots) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
        busy_++;
      }
    }
    try {
      for (auto& job : admitted) admit(std::move(job));
      for (auto& s : slots_)
        if (s->job && s->job->cancelled()) finish(*s, FinishReason::kCancelled);
      step();
    } catch (const std::exception& e) {
      // Nothing above should throw (the forward pass and the sampler are guarded); if something
      // does (out of memory), the requests in flight fail and the server lives on.
      for (auto& s : slots_) {
        if (!s->job) continue;
        engine_.clear(s->seq);
        finish(*s, FinishReason::kError, std::string("engine error: ") + e.what());
      }
    }
    int64_t used = 0;
    for (const auto& s : slots_) used += int64_t(s->seq.n_cached);
    std::lock_guard<std::mutex> lock(mu_);
    kv_used_ = used;
    if (store_) store_stats_ = store_->stats();
  }
  // Shutting down: whatever is still running or queued ends with an error.
  for (auto& s : slots_)
    if (s->job) finish(*s, FinishReason::kError, "the server is shutting down");
  std::deque<std::shared_ptr<Job>> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rest.swap(queue_);
  }
  for (auto& job : rest) {
    GenerationEvent e;
    e.kind = GenerationEvent::Kind::kDone;
    e.finish = FinishReason::kError;
    e.error = "the server is shutting down";
    job->push(std::move(e));
  }
}

void Scheduler::admit(std::shared_ptr<Job> job) {
  std::vector<SlotCache> views;
  std::vector<generate::Sequence*> others;
  for (const auto& s : slots_) {
    views.push_back({s->seq.id, std::span<const int32_t>(s->seq.tokens.data(), size_t(s->seq.n_cached)),
                     s->job != nullptr, s->last_used});
    others.push_back(&s->seq);
  }
  if (metrics_)
    metrics_->count_queue_wait(std::chrono::duration<double>(Clock::now() - job->queued_at).count());
  const GenerationRequest& req = job->request();
  Slot& s = *slots_[choose_slot(req.prompt, views, kv_).slot];
  s.job = std::move(job);
  s.admitted = ++clock_;
  s.last_used = clock_;
  s.n_prompt = int(req.prompt.size());
  s.taken = 0;
  s.generated = 0;
  s.t_admit = Clock::now();
  // Control tokens (<|turn>, <|think|>) print as nothing, as in llama.cpp's server; the markers the
  // output parser reads (<|channel>, <|tool_call>, <|"|>) are user-defined tokens and always print.
  s.stream.emplace(tokenizer_, req.stop, /*special_text=*/false);
  s.parser.reset();
  try {
    s.seq.sampler.emplace(req.sampling);
    s.seq.constraint = req.constraint;  // each slot its own grammar state (reset by start())
    s.seq.sample_after_prompt = true;
    s.seq.penalize_prompt = false;
    const generate::StartInfo info = engine_.start(s.seq, req.prompt, others, req.media);
    s.reused = info.reused;
    if (metrics_) {
      metrics_->count_prompt(int(req.prompt.size()), info.reused);
      if (info.reused > 0)
        metrics_->count_prefix_source(generate::prefix_source_name(info.source), info.reused);
    }
  } catch (const std::exception& e) {
    s.reused = 0;
    finish(s, FinishReason::kError, e.what());
    return;
  }
  if (req.parse_output) {
    text::OutputParserOptions po;
    po.tool_call_id_prefix = req.tool_call_id_prefix;
    s.parser.emplace(po);
    if (!req.assistant_prefix.empty()) {
      text::OutputDelta d = s.parser->push(req.assistant_prefix);
      if (!d.empty()) s.job->push({GenerationEvent::Kind::kDelta, std::move(d)});
    }
  }
}

void Scheduler::step() {
  std::vector<generate::Sequence*> decoders;
  std::vector<Slot*> decoding;
  int rows = 0;  // at most: each generating slot feeds `last` and up to draft_max drafts
  for (auto& s : slots_) {
    if (!s->decoding()) continue;
    decoders.push_back(&s->seq);
    decoding.push_back(s.get());
    rows += 1 + s->seq.length().draft_max();
  }
  // The oldest prompt still being processed gets the rest of the micro-batch.
  Slot* pre = nullptr;
  for (auto& s : slots_)
    if (s->prefilling() && (!pre || s->admitted < pre->admitted)) pre = s.get();
  int chunk = 0;
  if (pre) chunk = std::clamp(opt_.ubatch - rows, 0, pre->seq.prompt_left());
  if (decoders.empty() && chunk == 0) return;

  const auto t0 = Clock::now();
  try {
    engine_.step(decoders, chunk > 0 ? &pre->seq : nullptr, chunk);
  } catch (const std::exception& e) {
    // The engine emptied the sequences whose cells may be half-written.
    const std::string what = std::string("forward pass failed: ") + e.what();
    for (Slot* s : decoding) finish(*s, FinishReason::kError, what);
    if (pre && chunk > 0) finish(*pre, FinishReason::kError, what);
    return;
  }
  int decode_rows = 0;
  for (Slot* s : decoding) decode_rows += int(s->seq.emitted.size());
  if (metrics_)
    metrics_->count_step(chunk, decode_rows, std::chrono::duration<double>(Clock::now() - t0).count());

  for (Slot* s : decoding) {
    if (metrics_ && s->seq.length().draft_max() > 0)
      metrics_->count_speculation(int64_t(s->seq.draft.tokens.size()), int64_t(s->seq.emitted.size()) - 1);
    take_tokens(*s);
  }
  if (chunk > 0) {
    const auto& req = pre->req();
    if (req.report_progress) {
      GenerationEvent e;
      e.kind = GenerationEvent::Kind::kProgress;
      e.progress_done = pre->seq.n_cached;
      e.progress_total = int(req.prompt.size());
      e.progress_cached = pre->reused;
      e.progress_ms = ms_since(pre->t_admit);
      pre->job->push(std::move(e));
    }
    if (pre->seq.generating) {
      if (disk_) {
        engine_.save_prompt(pre->seq, pre->n_prompt);
        int64_t n = 0;
        uint64_t bytes = 0;
        for (const auto& e : disk_->list()) n++, bytes += e.bytes;
        std::lock_guard<std::mutex> lock(mu_);
        disk_entries_ = n, disk_bytes_ = bytes;
      }
      take_tokens(*pre);
    }
  }
}

// The tokens the step emitted, in order, each with generate()'s rules: end of generation, stop
// strings (through the output parser), max_tokens, a full context.
void Scheduler::take_tokens(Slot& s) {
  for (const int32_t token : s.seq.emitted) {
    if (!s.job) return;
    s.taken++;
    if (tokenizer_.is_eog(token)) {
      finish(s, FinishReason::kStop);
      return;
    }
    s.generated++;
    if (metrics_) metrics_->count_generated(1);
    emit_text(s, s.stream->push(token));
    if (!s.job) return;  // a stop string ended it
    if (s.stream->stopped() || (s.parser && s.parser->done())) {
      finish(s, FinishReason::kStop);
    } else if (s.generated >= s.req().max_tokens || s.n_prompt + s.taken > opt_.n_ctx) {
      finish(s, FinishReason::kLength);
    }
  }
}

// Generated text -> (chat) output parser -> a delta for the client (stop strings were applied).
void Scheduler::emit_text(Slot& s, const std::string& text) {
  if (!text.empty()) {
    text::OutputDelta d;
    if (s.parser)
      d = s.parser->push(text);
    else
      d.content = text;
    if (!d.empty()) s.job->push({GenerationEvent::Kind::kDelta, std::move(d)});
  }
  if (s.stream->stopped()) finish(s, FinishReason::kStop);
}

void Scheduler::finish(Slot& s, FinishReason reason, const std::string& error) {
  if (!s.job) return;
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    // Release what the detokenizer, the stop matcher and the parser still hold.
    text::OutputDelta d;
    const std::string rest = s.stream->finish();
    if (s.parser)
      d = s.parser->push(rest);
    else
      d.content = rest;
    if (s.parser) {
      text::OutputDelta tail = s.parser->finish();
      d.reasoning += tail.reasoning;
      d.content += tail.content;
      for (auto& c : tail.tool_calls) d.tool_calls.push_back(std::move(c));
    }
    if (!d.empty()) s.job->push({GenerationEvent::Kind::kDelta, std::move(d)});
    if (reason == FinishReason::kStop && s.parser && !s.parser->tool_calls().empty())
      reason = FinishReason::kToolCalls;
  }
  // The slot keeps the prompt and the reply (but the unfed last token) for the next request.
  if (s.seq.generating) {
    engine_.keep(s.seq, s.n_prompt + s.taken);
    engine_.finish(s.seq);
  } else if (s.seq.prefilling()) {
    s.seq.tokens.resize(s.seq.n_cached);
  }
  GenerationEvent e;
  e.kind = GenerationEvent::Kind::kDone;
  e.finish = reason;
  e.error = error;
  e.usage.prompt_tokens = s.n_prompt;
  e.usage.completion_tokens = s.generated;
  e.usage.cached_tokens = s.reused;
  e.usage.accepted_prediction_tokens = int(s.seq.stats.accepted);
  e.usage.rejected_prediction_tokens = int(s.seq.stats.drafted - s.seq.stats.accepted);
  if (metrics_)
    metrics_->count_finished(reason != FinishReason::kError && reason != FinishReason::kCancelled);
  s.job->push(std::move(e));
  release(s);
}

void Scheduler::release(Slot& s) {
  s.job.reset();
  s.last_used = ++clock_;
  std::lock_guard<std::mutex> lock(mu_);
  busy_--;
}

}  // namespace gem4::server
