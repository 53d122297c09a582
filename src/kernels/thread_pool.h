// A persistent pool of worker threads. parallel_for splits [0, n) into contiguous chunks, one per
// thread, runs them, and returns when all are done (one barrier per call). The calling thread works
// too, so a pool of N threads starts N-1 workers.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/function_ref.h"

namespace gem4 {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // fn(begin, end, thread_index) over a partition of [0, n) into at most size() chunks; chunk
  // boundaries are multiples of `grain` (except the last).
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t, int)> fn);
  // fn(begin, end, thread_index) over [0, n) in chunks of `chunk` handed out first come, first served:
  // a thread slowed down (another process on its core) takes fewer chunks instead of holding up the
  // barrier (with one thread, or n <= chunk, one call covers everything). Only for work whose result
  // does not depend on which thread runs which chunk.
  void parallel_for_dynamic(int64_t n, int64_t chunk, FunctionRef<void(int64_t, int64_t, int)> fn);
  // Like parallel_for_dynamic with chunks that shrink as the work runs out: each takes 1 / (2 x threads)
  // of what is left, at least `min_chunk`. Few hand-outs while there is plenty, and at the end the
  // threads wait for one another by at most a `min_chunk` (decode's GEMVs: the last chunk of a fixed
  // 1/16 split was ~5 % of a 0.25 ms product).
  void parallel_for_guided(int64_t n, int64_t min_chunk, FunctionRef<void(int64_t, int64_t, int)> fn);
  // fn(begin, end, thread_index) over [0, n) in shares: each thread owns a contiguous 1 / size() of it
  // and takes it from its front, a quarter of what is left of it at a time in whole `step`s (at least
  // one), so that what one thread runs lies end to end (one stream through memory). A thread whose
  // share is done takes over the back half (at least `step`) of the largest share another thread has
  // not taken yet, as its own share, which others may take from in turn: a thread slowed down holds up
  // the barrier by at most what it took last (a `step` towards the end). For work whose result does
  // not depend on which thread runs which range (decode's GEMVs: kernels/gemv_streams.h).
  void parallel_for_shares(int64_t n, int64_t step, FunctionRef<void(int64_t, int64_t, int)> fn);
  // fn(thread_index) on every thread.
  void run_on_all(FunctionRef<void(int)> fn);

 private:
  void worker(int index);
  void hand_out(int64_t n, int64_t min_chunk, int64_t parts, FunctionRef<void(int64_t, int64_t, int)> fn);
  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const FunctionRef<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  std::atomic<int> pending_{0};
  bool stop_ = false;
  // How long an idle worker spins before sleeping. Longer spins gained nothing measurable on decode
  // (1 ms: 16.45 vs 16.13 t/s, within noise) and cost a lot when the cores are oversubscribed (a
  // spinning worker burns the time slice the thread with work is waiting for). Having the spinning
  // worker prefetch the next product's first 0.75-1.5 MB of weights while the calling thread does a
  // layer's serial steps gained at most 1 % (26B-A4B decode, tokens alternated, within the noise).
  std::chrono::nanoseconds spin_ = std::chrono::microseconds(100);
};

// Runs fn serially when pool is null.
void parallel_for(ThreadPool* pool, int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t, int)> fn);
// Dynamic schedule with about `per_thread` chunks per thread (serial, one call, when pool is null).
void parallel_for_dynamic(ThreadPool* pool, int64_t n, int per_thread,
                          FunctionRef<void(int64_t, int64_t, int)> fn);
// Guided schedule (serial, one call, when pool is null).
void parallel_for_guided(ThreadPool* pool, int64_t n, int64_t min_chunk,
                         FunctionRef<void(int64_t, int64_t, int)> fn);
// Shares with take-overs (serial, one call, when pool is null).
void parallel_for_shares(ThreadPool* pool, int64_t n, int64_t step,
                         FunctionRef<void(int64_t, int64_t, int)> fn);

}  // namespace gem4
