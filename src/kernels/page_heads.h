// Page-head prefetches for streaming reads on x86: where a read enters a 4 KiB page, prefetch the first
// two lines of the page two pages further on (prefetcht0). The hardware prefetchers stop at 4 KiB
// boundaries and start on a new page only after its first misses; started early by these two lines,
// every page streams from its start. Used by the decode GEMVs of the 8-bit and 4-bit legacy types on
// AMD (GemvPrefetch, matmul_internal.h) and by the roofline's read loops (peaks_internal.h).
//
// Measured on a 2-vCPU Zen 5 VM (AVX-512), variants alternated in one process: a plain 512-bit read loop
// over 1 GiB read 1.20x faster with them in the median of 200 rounds (1.08x in its fastest rounds);
// one E2B token's Q4_0 products (1 GB, packed) ran 1.06-1.27x faster (medians of 30-round runs) than with
// every line prefetched 4 KiB ahead (prefetchnta), which they replace. One line did as well as two,
// four less well; 12-16 KiB ahead as well as 8, 4 less well. The heads of two or three pages at once
// (0.94-0.97x), the per-line prefetches kept beside them (0.96-0.99x) or heads taken by prefetchnta
// (0.90-0.97x) lost the gain: the hardware prefetchers seem to follow a few pages at a time, and only
// once a line of the page has come through L2.
#pragma once
#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

namespace gem4 {

constexpr size_t kPageBytes = 4096, kPageHeadAhead = 8192;

// For a read of [p, p + bytes) (0 < bytes <= 4096): the address of the page head to prefetch, where the
// read enters a new page (starts at a page's first byte, or crosses into the next page), else 0.
inline uintptr_t page_head_to_prefetch(const uint8_t* p, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p), last = first + bytes - 1;
  if (first / kPageBytes == last / kPageBytes && first % kPageBytes != 0) return 0;
  return last - last % kPageBytes + kPageHeadAhead;
}

// The page-head prefetch (two lines) for a read of [p, p + bytes), if it enters a new page.
inline void prefetch_page_head(const uint8_t* p, size_t bytes) {
  if (const uintptr_t head = page_head_to_prefetch(p, bytes)) {
    _mm_prefetch(reinterpret_cast<const char*>(head), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(head + 64), _MM_HINT_T0);
  }
}

}  // namespace gem4
