#include "kernels/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace gem4 {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const FunctionRef<void(int)>* job = nullptr;
    {
      // Spin before sleeping: ops arrive back to back during a forward pass, and a condition-variable
      // wake-up costs tens of microseconds. The spin is timed, not counted: a pause takes 14 ns on
      // Emerald Rapids and ~140 ns on other cores, so a count means ten times longer on one than on
      // the other.
      const auto spin_until = std::chrono::steady_clock::now() + spin_;
      for (int spin = 1;; ++spin) {
        if (__atomic_load_n(&generation_, __ATOMIC_ACQUIRE) != seen || __atomic_load_n(&stop_, __ATOMIC_ACQUIRE))
          break;
#if defined(__x86_64__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ volatile("yield");
#endif
        if (spin % 64 == 0 && std::chrono::steady_clock::now() >= spin_until) break;
      }
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  }
}

void ThreadPool::run_on_all(FunctionRef<void(int)> fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_release);
    __atomic_store_n(&generation_, generation_ + 1, __ATOMIC_RELEASE);
  }
  cv_.notify_all();
  fn(0);
  // Wait for the workers: spin first, then sleep.
  for (int spin = 0; spin < 40000 && pending_.load(std::memory_order_acquire) != 0; ++spin) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
  }
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  const int workers = static_cast<int>(std::min<int64_t>(n_threads_, n_grains));
  if (workers <= 1) {
    fn(0, n, 0);
    return;
  }
  run_on_all([&](int t) {
    if (t >= workers) return;
    const int64_t g0 = n_grains * t / workers, g1 = n_grains * (t + 1) / workers;
    const int64_t begin = g0 * grain, end = std::min(n, g1 * grain);
    if (begin < end) fn(begin, end, t);
  });
}

// [0, n) handed out first come, first served, in chunks of max(min_chunk, what is left / parts), or of
// min_chunk when parts is 0; one call covers everything with one thread or when n <= min_chunk.
void ThreadPool::hand_out(int64_t n, int64_t min_chunk, int64_t parts,
                          FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (n_threads_ == 1 || n <= min_chunk) {
    fn(0, n, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  run_on_all([&](int t) {
    int64_t begin = next.load(std::memory_order_relaxed);
    while (begin < n) {
      const int64_t size = parts > 0 ? std::max(min_chunk, (n - begin) / parts) : min_chunk;
      const int64_t end = std::min(n, begin + size);
      // On failure `begin` is reloaded with the current position and the chunk recomputed from it.
      if (next.compare_exchange_weak(begin, end, std::memory_order_relaxed)) {
        fn(begin, end, t);
        begin = next.load(std::memory_order_relaxed);
      }
    }
  });
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t chunk, FunctionRef<void(int64_t, int64_t, int)> fn) {
  hand_out(n, chunk, 0, fn);
}

void ThreadPool::parallel_for_guided(int64_t n, int64_t min_chunk,
                                     FunctionRef<void(int64_t, int64_t, int)> fn) {
  hand_out(n, min_chunk, 2 * int64_t(n_threads_), fn);
}

namespace {
// The free functions' rule: without a pool, one call over everything; with one, its schedule.
template <class Schedule>
void on_pool(ThreadPool* pool, int64_t n, FunctionRef<void(int64_t, int64_t, int)> fn, Schedule&& schedule) {
  if (pool) return schedule(*pool);
  if (n > 0) fn(0, n, 0);
}
}  // namespace

void parallel_for_guided(ThreadPool* pool, int64_t n, int64_t min_chunk,
                         FunctionRef<void(int64_t, int64_t, int)> fn) {
  on_pool(pool, n, fn, [&](ThreadPool& p) { p.parallel_for_guided(n, min_chunk, fn); });
}

void ThreadPool::parallel_for_shares(int64_t n, int64_t step, FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (n <= 0) return;
  step = std::max<int64_t>(1, step);
  if (n_threads_ == 1 || n <= step) {
    fn(0, n, 0);
    return;
  }
  // A share is [front, back), both in one atomic word (front in the low 32 bits) so that its owner taking
  // from the front and another thread taking over its back never overlap.
  if (n > int64_t(UINT32_MAX)) return hand_out(n, step, 2 * int64_t(n_threads_), fn);
  struct alignas(64) Share {  // a cache line each: the owners' steps do not contend
    std::atomic<uint64_t> range{0};
  };
  const auto pack = [](uint64_t front, uint64_t back) { return front | back << 32; };
  const auto front = [](uint64_t r) { return int64_t(r & 0xFFFFFFFFu); };
  const auto back = [](uint64_t r) { return int64_t(r >> 32); };
  // On the stack for the usual pool sizes: this runs for every decode product.
  constexpr int kOnStack = 8;
  Share on_stack[kOnStack];
  std::vector<Share> on_heap(n_threads_ > kOnStack ? size_t(n_threads_) : 0);
  Share* shares = n_threads_ > kOnStack ? on_heap.data() : on_stack;
  for (int t = 0; t < n_threads_; ++t)
    shares[size_t(t)].range.store(pack(uint64_t(n * t / n_threads_), uint64_t(n * (t + 1) / n_threads_)),
                                  std::memory_order_relaxed);
  // A thread takes a quarter of what is left of its own share at a time (in whole steps, at least one):
  // fewer, longer runs than one step each, while the last ones, where a thread held up would keep the
  // others waiting, are still a step.
  const auto own_step = [step](int64_t left) { return std::max(step, left / 4 / step * step); };
  run_on_all([&](int t) {
    std::atomic<uint64_t>& own = shares[size_t(t)].range;
    for (;;) {
      // The own share from the front. On a failed exchange r is reloaded.
      for (uint64_t r = own.load(std::memory_order_relaxed); front(r) < back(r);) {
        const int64_t end = std::min(back(r), front(r) + own_step(back(r) - front(r)));
        if (own.compare_exchange_weak(r, pack(uint64_t(end), uint64_t(back(r))), std::memory_order_relaxed)) {
          fn(front(r), end, t);
          r = own.load(std::memory_order_relaxed);
        }
      }
      // Done: take over the back half of the largest share left, or stop when none is.
      int victim = -1;
      int64_t most = 0;
      for (int o = 0; o < n_threads_; ++o) {
        const uint64_t r = shares[size_t(o)].range.load(std::memory_order_relaxed);
        if (o != t && back(r) - front(r) > most) victim = o, most = back(r) - front(r);
      }
      if (victim < 0) return;
      std::atomic<uint64_t>& other = shares[size_t(victim)].range;
      uint64_t r = other.load(std::memory_order_relaxed);
      for (;;) {
        const int64_t left = back(r) - front(r);
        if (left <= 0) break;  // taken meanwhile: look again
        const int64_t cut = back(r) - std::min(left, std::max(step, left / 2));
        if (other.compare_exchange_weak(r, pack(uint64_t(front(r)), uint64_t(cut)),
                                        std::memory_order_relaxed)) {
          // Only this thread writes its own share while it is empty (others take from non-empty ones).
          own.store(pack(uint64_t(cut), uint64_t(back(r))), std::memory_order_relaxed);
          break;
        }
      }
    }
  });
}

void parallel_for_shares(ThreadPool* pool, int64_t n, int64_t step,
                         FunctionRef<void(int64_t, int64_t, int)> fn) {
  on_pool(pool, n, fn, [&](ThreadPool& p) { p.parallel_for_shares(n, step, fn); });
}

void parallel_for_dynamic(ThreadPool* pool, int64_t n, int per_thread,
                          FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (!pool) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  const int64_t chunks = int64_t(pool->size()) * std::max(1, per_thread);
  pool->parallel_for_dynamic(n, (n + chunks - 1) / chunks, fn);
}

void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (pool) {
    pool->parallel_for(n, grain, fn);
  } else if (n > 0) {
    fn(0, n, 0);
  }
}

}  // namespace gem4
