// Decode runs the same matrix products in the same order every token, and between two of them the
// calling thread does serial work (norms, RoPE, attention, activations) while memory sits idle. The
// next product then starts with nothing on its way: each thread waits a memory latency per line until
// the prefetchers catch up. A ProductPrefetcher learns which product follows which and, right after
// one, asks for the first lines of the next where the threads will begin reading it, so that this wait
// overlaps the serial work. Only the decode GEMVs on packed copies take part; results never change.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "kernels/matmul.h"

namespace gem4 {

class ThreadPool;

class ProductPrefetcher {
 public:
  // Call after each product (targets[0..count) sharing one input of `rows` rows) run with `pool`.
  void after(const MatmulTarget* targets, int count, int64_t rows, ThreadPool* pool);

 private:
  struct Product {
    std::array<MatmulTarget, kMaxSharedTargets> targets;
    int count = 0;
  };
  std::unordered_map<const void*, Product> next_;  // keyed by the first target's packed copy
  const void* last_ = nullptr;
};

// Prefetches into L2 the first `bytes` of each place where the decode GEMV of these products, split
// among `threads` threads, starts reading (packed copies only; otherwise nothing).
void prefetch_product_start(const MatmulTarget* targets, int count, int threads, size_t bytes);

}  // namespace gem4
