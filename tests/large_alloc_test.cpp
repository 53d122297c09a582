// gguf/large_alloc.h: blocks of every size class start zeroed and are usable to their last byte;
// large ones start on a 2 MiB boundary (where a huge page fits; not under ASan, where all come from
// calloc); vectors built on the allocator keep
// their elements through growth.
#include "gguf/large_alloc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

namespace gem4 {
namespace {

TEST(LargeAlloc, EverySizeClassIsZeroedWritableAndAligned) {
  const size_t sizes[] = {0,
                          1,
                          4095,
                          kMappedBytes - 1,
                          kMappedBytes,
                          kMappedBytes + 1,
                          kLargeBlockBytes - 1,
                          kLargeBlockBytes,
                          kLargeBlockBytes + 1,
                          5 * kLargeBlockBytes + 123};
  for (size_t n : sizes)
    for (Pages pages : {Pages::Huge, Pages::Small}) {
      SCOPED_TRACE(pages == Pages::Huge ? "huge pages" : "small pages");
      auto* p = static_cast<uint8_t*>(allocate_large(n, pages));
      ASSERT_NE(p, nullptr) << n;
      for (size_t i = 0; i < n; i += 997) EXPECT_EQ(p[i], 0) << n << " at " << i;
      if (n) {
        EXPECT_EQ(p[n - 1], 0) << n;
      }
      if (kLargeBlocksMapped && n >= kLargeBlockBytes && pages == Pages::Huge) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kLargeBlockBytes, 0u) << n;
      }
      for (size_t i = 0; i < n; i += 4096) p[i] = uint8_t(i >> 12);
      if (n) p[n - 1] = 0xAB;  // the last byte is inside the block (ASan or a fault says otherwise)
      free_large(p, n);
    }
  free_large(nullptr, kLargeBlockBytes);  // a no-op, as free(nullptr)
}

TEST(LargeAlloc, VectorsAndStringsKeepTheirContentsThroughGrowth) {
  LargeVector<uint32_t> v;
  for (uint32_t i = 0; i < 3u << 20; ++i) v.push_back(i * 2654435761u);  // through all three classes
  for (uint32_t i = 0; i < v.size(); i += 4099) ASSERT_EQ(v[i], i * 2654435761u) << i;
  LargeVector<uint32_t> copy = v;
  EXPECT_EQ(copy, v);
  LargeVector<double> zeros(kLargeBlockBytes / sizeof(double) + 7);
  EXPECT_EQ(std::accumulate(zeros.begin(), zeros.end(), 0.0), 0.0);
  LargeString s;
  for (int i = 0; i < 300000; ++i) s += char('a' + i % 26);
  EXPECT_EQ(s.size(), 300000u);
  EXPECT_EQ(s[299999], char('a' + 299999 % 26));
  EXPECT_EQ(std::string_view(s).substr(26, 3), "abc");
}

}  // namespace
}  // namespace gem4
