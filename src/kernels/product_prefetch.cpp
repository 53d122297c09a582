#include "kernels/product_prefetch.h"

#include <algorithm>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"

namespace gem4 {

namespace {

// Per start, 8 KiB: what the GEMV's own software prefetch keeps in flight ahead of each thread
// (kGemvPrefetchL2Lines). In a benchmark of E2B's Q4_0 layer products with 10 us of serial work before
// each, it cut the cost per product (intercept of time vs bytes) from ~12 to ~8 us.
constexpr size_t kStartBytes = size_t{8} << 10;

void prefetch_l2(const uint8_t* p, size_t bytes) {
#if defined(__x86_64__)
  for (size_t line = 0; line < bytes; line += 64) _mm_prefetch(reinterpret_cast<const char*>(p + line), _MM_HINT_T1);
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace

void prefetch_product_start(const MatmulTarget* targets, int count, int threads, size_t bytes) {
  if (count < 1 || !reads_packed(targets[0].w)) return;
  // The shared GEMV numbers the panels of all products one after the other (packed_gemv_shared); a
  // product that cannot share (another type or width) runs alone.
  for (int j = 1; j < count; ++j) {
    if (!reads_packed(targets[j].w) || targets[j].w.type != targets[0].w.type || targets[j].w.in != targets[0].w.in) {
      count = 1;
      break;
    }
  }
  const size_t panel_bytes = size_t(targets[0].w.in / kQK) * packed_block_bytes(targets[0].w.type);
  int64_t panels[kMaxSharedTargets], total = 0;
  for (int j = 0; j < count; ++j) total += panels[j] = (targets[j].w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  // Where each thread's first chunk begins: packed_gemv_run hands out panels with
  // parallel_for_guided, min_chunk 1.
  for (int64_t begin : guided_first_begins(total, 1, threads)) {
    int64_t local = begin;
    int j = 0;
    while (local >= panels[j]) local -= panels[j++];
    const size_t left = size_t(panels[j] - local) * panel_bytes;  // to the end of this product
    prefetch_l2(targets[j].w.packed + size_t(local) * panel_bytes, std::min(bytes, left));
  }
}

void ProductPrefetcher::after(const MatmulTarget* targets, int count, int64_t rows, ThreadPool* pool) {
  if (count < 1 || count > kMaxSharedTargets || rows > kPackedGemvMaxRows || !reads_packed(targets[0].w)) {
    last_ = nullptr;  // a product of another kind breaks the chain
    return;
  }
  const void* key = targets[0].w.packed;
  if (last_ && last_ != key) {
    Product& p = next_[last_];
    std::copy(targets, targets + count, p.targets.begin());
    p.count = count;
  }
  last_ = key;
  const auto it = next_.find(key);
  if (it != next_.end()) {
    prefetch_product_start(it->second.targets.data(), it->second.count, pool ? pool->size() : 1, kStartBytes);
  }
}

}  // namespace gem4
