// measure_read_bandwidth_over, the plain read of the weights one decoded token streams that
// `gem4 bench --roofline` divides decode by: what it reads and what it counts.
#include "kernels/peaks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "isa_override.h"
#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#if defined(__x86_64__)
#include "kernels/page_heads.h"
#include "kernels/peaks_internal.h"
#endif

namespace gem4 {
namespace {

// Spans of every awkward size, each one exactly its own heap allocation: a read loop that went past a
// span's end (its last partial 256 bytes are to be left out) or started a thread's slice in the wrong
// place would read outside it, which the ASan build of this test reports. On every kernel set, with no
// pool, two threads and three (slices of uneven size).
TEST(Peaks, ReadOverSpansStaysInsideThemOnEverySet) {
  const size_t sizes[] = {1, 255, 256, 257, 511, 768, 4096 + 100, (size_t(1) << 20) + 17, 3 * 256 * 7};
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  std::vector<ByteSpan> spans;
  for (size_t n : sizes) {
    buffers.push_back(std::make_unique<uint8_t[]>(n));
    for (size_t i = 0; i < n; ++i) buffers.back()[i] = uint8_t(i * 7);
    spans.push_back({buffers.back().get(), n});
  }
  ThreadPool two(2), three(3);
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    const test::IsaOverride scope(isa);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three}) {
      const double gbs = measure_read_bandwidth_over(pool, spans);
      EXPECT_TRUE(std::isfinite(gbs) && gbs > 0) << isa_name(isa) << ": " << gbs;
    }
  }
}

// Nothing to read (no spans, or only spans shorter than one 256-byte step) is 0 GB/s, not a division by
// zero: the roofline then leaves the column out.
TEST(Peaks, ReadOverNothingIsZero) {
  ThreadPool pool(2);
  EXPECT_EQ(measure_read_bandwidth_over(&pool, {}), 0.0);
  std::vector<uint8_t> small(255, 1);
  EXPECT_EQ(measure_read_bandwidth_over(&pool, {{small.data(), small.size()}, {small.data(), 100}}), 0.0);
  EXPECT_EQ(measure_read_bandwidth_over(nullptr, {{small.data(), 0}}), 0.0);
}

// The read loops' buffer is four times the last-level cache, kept between 256 MiB and 1 GiB: small
// caches leave it at 256 MiB, a VM's 260 MiB L3 (an Emerald Rapids host) takes it to 1 GiB, and it
// never falls below 4 x a cache under the cap.
TEST(Peaks, ReadBufferOutgrowsTheLastLevelCache) {
  constexpr size_t kMiB = size_t(1) << 20;
  EXPECT_EQ(read_buffer_bytes(0), 256 * kMiB);
  EXPECT_EQ(read_buffer_bytes(32 * kMiB), 256 * kMiB);
  EXPECT_EQ(read_buffer_bytes(96 * kMiB), 384 * kMiB);
  EXPECT_EQ(read_buffer_bytes(260 * kMiB), 1024 * kMiB);
  EXPECT_EQ(read_buffer_bytes(size_t(8) << 30), 1024 * kMiB);
}

// This machine's largest cache is found (sysfs, or cpuid through sysconf on x86-64) and sized sensibly.
TEST(Peaks, LastLevelCacheIsFound) {
  const size_t llc = last_level_cache_bytes();
#if !defined(__x86_64__)
  if (llc == 0) GTEST_SKIP() << "this machine reports no cache sizes";
#endif
  EXPECT_GE(llc, size_t(32) << 10);
  EXPECT_LE(llc, size_t(4) << 30);
}

#if defined(__x86_64__)
// Where a read enters a new 4 KiB page, the head of the page two further on is prefetched; a read inside
// one page that does not start it prefetches nothing.
TEST(PageHeads, PrefetchedWhereAReadEntersANewPage) {
  const auto at = [](uintptr_t a) { return reinterpret_cast<const uint8_t*>(a); };
  const uintptr_t page = uintptr_t(1) << 30;  // any page-aligned address: nothing is read
  EXPECT_EQ(page_head_to_prefetch(at(page), 576), page + 2 * kPageBytes);  // starts a page
  EXPECT_EQ(page_head_to_prefetch(at(page + 576), 576), 0u);               // inside it
  EXPECT_EQ(page_head_to_prefetch(at(page + 4096 - 576), 576), 0u);        // ends on its last byte
  EXPECT_EQ(page_head_to_prefetch(at(page + 4096 - 64), 576),
            page + 3 * kPageBytes);  // crosses into the next
  EXPECT_EQ(page_head_to_prefetch(at(page + 4095), 2), page + 3 * kPageBytes);
  EXPECT_EQ(page_head_to_prefetch(at(page + 64), 4096), page + 3 * kPageBytes);
}

// The read loops with page-head prefetches read the same bytes as the plain ones (equal sums), on every
// set the CPU has, for lengths that start and end anywhere within pages.
TEST(PageHeads, ReadLoopsWithThemSumTheSameBytes) {
  std::vector<uint8_t> buf(5 * 4096 + 1024);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 131 + (i >> 9));
  struct Pair {
    ReadLoop plain, heads;
    bool supported;
  };
  const Pair pairs[] = {{read_loop_avx2, read_loop_avx2_page_heads, isa_supported(Isa::Avx2)},
                        {read_loop_avx512, read_loop_avx512_page_heads, isa_supported(Isa::Avx512)}};
  for (const Pair& pr : pairs) {
    if (!pr.supported) continue;
    for (size_t off : {size_t(0), size_t(64), size_t(3968), size_t(1024)})
      for (size_t n : {size_t(256), size_t(4096), size_t(4096 + 512), size_t(4 * 4096)})
        EXPECT_EQ(pr.heads(buf.data() + off, n), pr.plain(buf.data() + off, n)) << off << " " << n;
  }
}

// The read loops in streams read every byte once, as the plain ones (equal sums): lengths short of one
// group of chunks (all read by the plain tail), whole groups, and groups with a tail; on every set the
// CPU has.
TEST(ReadStreams, ReadLoopsInStreamsSumTheSameBytes) {
  std::vector<uint8_t> buf(17 * kStreamChunkBytes + 1024);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 131 + (i >> 9));
  struct Set {
    ReadLoop plain, four, eight;
    bool supported;
  };
  const Set sets[] = {
      {read_loop_avx2, read_loop_avx2_4_streams, read_loop_avx2_8_streams, isa_supported(Isa::Avx2)},
      {read_loop_avx512, read_loop_avx512_4_streams, read_loop_avx512_8_streams, isa_supported(Isa::Avx512)}};
  const size_t chunk = kStreamChunkBytes;
  for (const Set& st : sets) {
    if (!st.supported) continue;
    for (size_t off : {size_t(0), size_t(64), size_t(1024)})
      for (size_t n : {size_t(256), 3 * chunk + 512, 4 * chunk, 8 * chunk, 8 * chunk + 768, 12 * chunk + 256,
                       16 * chunk + 512}) {
        const uint64_t want = st.plain(buf.data() + off, n);
        EXPECT_EQ(st.four(buf.data() + off, n), want) << off << " " << n;
        EXPECT_EQ(st.eight(buf.data() + off, n), want) << off << " " << n;
      }
  }
}
#endif

}  // namespace
}  // namespace gem4
