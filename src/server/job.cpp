#include "server/job.h"

namespace gem4::server {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kToolCalls:
      return "tool_calls";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "stop";
}

std::vector<GenerationEvent> Job::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<GenerationEvent> out(std::make_move_iterator(events_.begin()),
                                   std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

bool Job::wait_for_event(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
}

void Job::push(GenerationEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.kind == GenerationEvent::Kind::kDone) done_.store(true);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

}  // namespace gem4::server
