#include "server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

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
  int seq = 0;
  std::vector<int32_t> cached;  // tokens whose K/V sequence `seq` holds (== kv.seq_len(seq))
  uint64_t last_used = 0;

  // The request being served (null when idle) and its progress.
  std::shared_ptr<Job> job;
  uint64_t admitted = 0;   // admission order: the oldest prompt is processed first
  size_t prompt_done = 0;  // prompt tokens whose K/V are cached
  int reused = 0;          // of which came from the prefix cache
  int32_t pending = -1;    // sampled token, fed at the next step
  int generated = 0;
  Clock::time_point t_admit;
  std::optional<generate::Sampler> sampler;
  std::optional<text::StreamingDetokenizer> detok;
  std::optional<generate::StopStringMatcher> stops;
  std::optional<text::OutputParser> parser;

  const GenerationRequest& req() const { return job->request(); }
  bool prefilling() const { return job && prompt_done < req().prompt.size(); }
  bool decoding() const { return job && pending >= 0; }
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
      forward_(model, &pool_) {
  if (opt.slots < 1) throw std::invalid_argument("--parallel must be >= 1");
  if (opt.ubatch < 1) throw std::invalid_argument("--ubatch must be >= 1");
  if (opt.n_ctx < 2) throw std::invalid_argument("--ctx must be >= 2");
  forward_.ubatch = opt.ubatch;
  forward_.switches = opt.switches;
  for (int i = 0; i < opt.slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->seq = i;
  }
  engine_ = std::thread([this] { engine_loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
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

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (engine_.joinable()) engine_.join();
}

SchedulerState Scheduler::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerState s;
  s.slots = opt_.slots;
  s.slots_busy = busy_;
  s.queued = int(queue_.size());
  s.kv_cells_used = kv_used_;
  s.kv_cells_total = int64_t(opt_.n_ctx) * opt_.slots;
  s.kv_bytes = kv_.bytes();
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
        kv_.clear(s->seq);
        s->cached.clear();
        finish(*s, FinishReason::kError, std::string("engine error: ") + e.what());
      }
    }
    int64_t used = 0;
    for (const auto& s : slots_) used += int64_t(s->cached.size());
    std::lock_guard<std::mutex> lock(mu_);
    kv_used_ = used;
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
  for (const auto& s : slots_) views.push_back({s->seq, &s->cached, s->job != nullptr, s->last_used});
  const GenerationRequest& req = job->request();
  const PrefixChoice choice = choose_slot(req.prompt, views, kv_);
  Slot& s = *slots_[choice.slot];
  if (choice.source != choice.slot) {
    const Slot& src = *slots_[choice.source];
    kv_.copy_prefix(src.seq, s.seq, choice.reuse);
    s.cached.assign(src.cached.begin(), src.cached.begin() + choice.reuse);
  } else {
    kv_.truncate(s.seq, choice.reuse);
    s.cached.resize(choice.reuse);
  }
  s.job = std::move(job);
  s.admitted = ++clock_;
  s.last_used = clock_;
  s.prompt_done = size_t(choice.reuse);
  s.reused = choice.reuse;
  s.pending = -1;
  s.generated = 0;
  s.t_admit = Clock::now();
  // Control tokens (<|turn>, <|think|>) print as nothing, as in llama.cpp's server; the markers the
  // output parser reads (<|channel>, <|tool_call>, <|"|>) are user-defined tokens and always print.
  s.detok.emplace(tokenizer_, /*special=*/false);
  s.stops.emplace(req.stop);
  s.parser.reset();
  if (metrics_) metrics_->count_prompt(int(req.prompt.size()), choice.reuse);
  try {
    s.sampler.emplace(req.sampling);
  } catch (const std::exception& e) {
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
  Batch batch;
  std::vector<Slot*> decoders;
  for (auto& s : slots_) {
    if (!s->decoding()) continue;
    batch.push_back({s->pending, int32_t(s->cached.size()), s->seq, true, false});
    decoders.push_back(s.get());
  }
  // The oldest prompt still being processed gets the rest of the micro-batch.
  Slot* pre = nullptr;
  for (auto& s : slots_)
    if (s->prefilling() && (!pre || s->admitted < pre->admitted)) pre = s.get();
  int chunk = 0;
  if (pre) {
    const auto& prompt = pre->req().prompt;
    chunk = std::min<int>(opt_.ubatch - int(batch.size()), int(prompt.size() - pre->prompt_done));
    chunk = std::max(chunk, 0);
    for (int i = 0; i < chunk; ++i) {
      const size_t k = pre->prompt_done + i;
      batch.push_back({prompt[k], int32_t(pre->cached.size() + i), pre->seq, k + 1 == prompt.size(), false});
    }
  }
  if (batch.empty()) return;

  const auto t0 = Clock::now();
  out_.clear();
  try {
    forward_.run(batch, kv_, out_);
  } catch (const std::exception& e) {
    // The cache of these sequences may be half-written: forget it.
    const std::string what = std::string("forward pass failed: ") + e.what();
    for (Slot* s : decoders) {
      kv_.clear(s->seq);
      s->cached.clear();
      finish(*s, FinishReason::kError, what);
    }
    if (pre && chunk > 0) {
      kv_.clear(pre->seq);
      pre->cached.clear();
      finish(*pre, FinishReason::kError, what);
    }
    return;
  }
  if (metrics_)
    metrics_->count_step(chunk, int(decoders.size()),
                         std::chrono::duration<double>(Clock::now() - t0).count());

  for (Slot* s : decoders) {
    s->cached.push_back(s->pending);
    s->pending = -1;
  }
  if (chunk > 0) {
    const auto& prompt = pre->req().prompt;
    pre->cached.insert(pre->cached.end(), prompt.begin() + pre->prompt_done,
                       prompt.begin() + pre->prompt_done + chunk);
    pre->prompt_done += chunk;
  }
  for (size_t i = 0; i < decoders.size(); ++i) sample_and_emit(*decoders[i], out_.logits_of(int(i)));
  if (chunk > 0) {
    const auto& req = pre->req();
    if (req.report_progress) {
      GenerationEvent e;
      e.kind = GenerationEvent::Kind::kProgress;
      e.progress_done = int(pre->prompt_done);
      e.progress_total = int(req.prompt.size());
      e.progress_cached = pre->reused;
      e.progress_ms = ms_since(pre->t_admit);
      pre->job->push(std::move(e));
    }
    if (pre->prompt_done == req.prompt.size()) sample_and_emit(*pre, out_.logits_of(int(batch.size()) - 1));
  }
}

void Scheduler::sample_and_emit(Slot& s, const float* logits) {
  if (!logits) {
    finish(s, FinishReason::kError, "internal error: no logits for a generating slot");
    return;
  }
  int32_t token = 0;
  try {
    token = s.sampler->sample(logits, out_.n_vocab);
  } catch (const std::exception& e) {
    finish(s, FinishReason::kError, std::string("sampling failed: ") + e.what());
    return;
  }
  s.sampler->accept(token);
  if (tokenizer_.is_eog(token)) {
    finish(s, FinishReason::kStop);
    return;
  }
  s.generated++;
  if (metrics_) metrics_->count_generated(1);
  emit_text(s, s.detok->push(token));
  if (!s.job) return;  // a stop string ended it
  if (s.stops->stopped() || (s.parser && s.parser->done())) {
    finish(s, FinishReason::kStop);
  } else if (s.generated >= s.req().max_tokens || int(s.cached.size()) + 1 > opt_.n_ctx) {
    finish(s, FinishReason::kLength);
  } else {
    s.pending = token;
  }
}

// Generated text -> stop strings -> (chat) output parser -> a delta for the client.
void Scheduler::emit_text(Slot& s, const std::string& text) {
  if (text.empty()) return;
  const generate::StopStringMatcher::Result r = s.stops->feed(text);
  text::OutputDelta d;
  if (s.parser)
    d = s.parser->push(r.text);
  else
    d.content = r.text;
  if (!d.empty()) s.job->push({GenerationEvent::Kind::kDelta, std::move(d)});
  if (r.stopped) finish(s, FinishReason::kStop);
}

void Scheduler::finish(Slot& s, FinishReason reason, const std::string& error) {
  if (!s.job) return;
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    // Release what the detokenizer, the stop matcher and the parser still hold.
    text::OutputDelta d;
    if (!s.stops->stopped()) {
      std::string rest = s.stops->feed(s.detok->flush()).text;
      if (!s.stops->stopped()) rest += s.stops->flush();
      if (s.parser)
        d = s.parser->push(rest);
      else
        d.content = rest;
    }
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
  GenerationEvent e;
  e.kind = GenerationEvent::Kind::kDone;
  e.finish = reason;
  e.error = error;
  e.usage.prompt_tokens = int(s.req().prompt.size());
  e.usage.completion_tokens = s.generated;
  e.usage.cached_tokens = s.reused;
  if (metrics_)
    metrics_->count_finished(reason != FinishReason::kError && reason != FinishReason::kCancelled);
  s.job->push(std::move(e));
  release(s);
}

void Scheduler::release(Slot& s) {
  s.job.reset();
  s.pending = -1;
  s.last_used = ++clock_;
  std::lock_guard<std::mutex> lock(mu_);
  busy_--;
}

}  // namespace gem4::server
