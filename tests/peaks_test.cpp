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

}  // namespace
}  // namespace gem4
