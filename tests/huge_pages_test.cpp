// gguf/huge_pages.h: a file mapping partly in 4 KiB page-cache folios is read again into 2 MiB ones,
// with its contents unchanged; where the kernel shows it cannot (nothing in 2 MiB pages, a mapping
// off the 2 MiB grid, pages that come back small) it stops, and pages not in memory are not read. The page
// cache is arranged by hand: pages dropped (POSIX_FADV_DONTNEED) and read back through a mapping advised
// MADV_RANDOM (no read-ahead) come back as 4 KiB folios; read through one advised MADV_HUGEPAGE, as 2 MiB
// ones where the kernel and file system make large folios. Where they do not, or the kernel cannot say
// (PAGEMAP_SCAN, Linux 6.7), the tests that need them skip and say so.
#include "gguf/huge_pages.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/file_io.h"

namespace gem4 {
namespace {

namespace fs = std::filesystem;
constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kFileBytes = 8 * kHuge + 12 * 1024;  // 8 whole 2 MiB blocks and a tail

uint32_t word(size_t i) { return uint32_t(i * 2654435761u) ^ 0x5bd1e995u; }

class HugePages : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("gem4_huge_pages_" + std::to_string(getpid()))).string();
    std::vector<uint32_t> words(kFileBytes / 4);
    for (size_t i = 0; i < words.size(); ++i) words[i] = word(i);
    Fd f{::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    ASSERT_GE(f.fd, 0) << path_;
    ASSERT_TRUE(write_exact(f.fd, words.data(), kFileBytes, 0));
    ASSERT_EQ(::fdatasync(f.fd), 0);
    ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  void TearDown() override {
    if (map_) ::munmap(map_, kFileBytes);
    std::error_code ec;
    fs::remove(path_, ec);
  }

  // Reads [from, to) of the file into the page cache one 4 KiB page at a time.
  void read_in_small_pages(size_t from, size_t to) {
    Fd f{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
    void* m = ::mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, f.fd, 0);
    ASSERT_NE(m, MAP_FAILED);
    ::madvise(m, kFileBytes, MADV_RANDOM);
    volatile uint8_t sum = 0;
    for (size_t at = from; at < to; at += 4096) sum = sum + static_cast<const uint8_t*>(m)[at];
    ::munmap(m, kFileBytes);
  }

  // Maps the whole file as the packed-weight cache does (at `where` when given), every page read in.
  void map_file(void* where = nullptr) {
    Fd f{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
    map_ = ::mmap(where, kFileBytes, PROT_READ, MAP_SHARED | (where ? MAP_FIXED : 0), f.fd, 0);
    ASSERT_NE(map_, MAP_FAILED);
    ::madvise(map_, kFileBytes, MADV_HUGEPAGE);
    ::madvise(map_, kFileBytes, MADV_POPULATE_READ);
  }

  HugePageReread reread(size_t bytes) const {
    Fd f{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
    return reread_into_huge_pages(f.fd, map_, bytes);
  }

  void expect_contents() const {
    const auto* w = static_cast<const uint32_t*>(map_);
    for (size_t i = 0; i < kFileBytes / 4; ++i) {
      if (w[i] != word(i)) FAIL() << "word " << i << " changed";
    }
  }

  std::string path_;
  void* map_ = nullptr;
};

TEST_F(HugePages, SmallHalfIsReadAgainIntoHugePagesWithTheSameContents) {
  read_in_small_pages(kFileBytes / 2, kFileBytes);  // blocks 4-7 and the tail in 4 KiB folios
  map_file();
  const int64_t small = bytes_in_small_pages(map_, kFileBytes);
  if (small < 0) GTEST_SKIP() << "this kernel cannot say which pages are mapped huge (PAGEMAP_SCAN)";
  if (size_t(small) >= kFileBytes - kFileBytes / 2 + kHuge) {
    GTEST_SKIP() << "no large folios for files in " << path_ << " on this kernel (" << small
                 << " bytes outside 2 MiB pages)";
  }
  ASSERT_GE(size_t(small), kFileBytes / 2) << "the half read a page at a time came back in 2 MiB pages";

  const HugePageReread r = reread(kFileBytes);
  EXPECT_TRUE(r.measured);
  EXPECT_EQ(r.small_before, size_t(small));
  EXPECT_EQ(r.reread, 4 * kHuge);  // the four whole blocks of the second half, not the tail
  EXPECT_EQ(r.stopped, "");
  EXPECT_LT(r.small_after, kHuge);  // the tail only
  EXPECT_EQ(bytes_in_small_pages(map_, kFileBytes), int64_t(r.small_after));
  expect_contents();
}

// Pages another mapping holds stay in the page cache (POSIX_FADV_DONTNEED leaves mapped pages), so
// they come back small: the first batch says so and the rest is not tried.
TEST_F(HugePages, StopsWhenPagesComeBackSmall) {
  read_in_small_pages(kFileBytes / 2, kFileBytes);
  Fd f{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  auto* other = static_cast<const uint8_t*>(::mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, f.fd, 0));
  ASSERT_NE(other, MAP_FAILED);
  volatile uint8_t sum = 0;
  for (size_t at = kFileBytes / 2; at < kFileBytes; at += 4096) sum = sum + other[at];
  map_file();
  const int64_t small = bytes_in_small_pages(map_, kFileBytes);
  if (small < 0) GTEST_SKIP() << "this kernel cannot say which pages are mapped huge (PAGEMAP_SCAN)";
  if (size_t(small) >= kFileBytes - kFileBytes / 2 + kHuge) GTEST_SKIP() << "no large folios for files here";
  const HugePageReread r = reread(kFileBytes);
  EXPECT_EQ(r.reread, 4 * kHuge);
  EXPECT_NE(r.stopped.find("4 of 4 blocks read again came back in small pages"), std::string::npos)
      << r.stopped;
  EXPECT_EQ(r.small_after, r.small_before);
  expect_contents();
  ::munmap(const_cast<uint8_t*>(other), kFileBytes);
}

// Pages not in memory (here: not mapped by this process) are not read: a file larger than the memory
// is never read through at load.
TEST_F(HugePages, PagesNotInMemoryAreLeftAlone) {
  read_in_small_pages(kFileBytes / 2, kFileBytes);
  map_file();
  const int64_t small = bytes_in_small_pages(map_, kFileBytes);
  if (small < 0) GTEST_SKIP() << "this kernel cannot say which pages are mapped huge (PAGEMAP_SCAN)";
  if (size_t(small) >= kFileBytes - kFileBytes / 2 + kHuge) GTEST_SKIP() << "no large folios for files here";
  ::madvise(static_cast<uint8_t*>(map_) + 4 * kHuge, 4 * kHuge, MADV_DONTNEED);  // blocks 4-7 unmapped
  const HugePageReread r = reread(kFileBytes);
  EXPECT_TRUE(r.measured);
  EXPECT_EQ(r.small_before, kFileBytes - 8 * kHuge);  // the tail only
  EXPECT_EQ(r.reread, 0u);
  expect_contents();
}

TEST_F(HugePages, NothingIsReadWhereNoPageIsHuge) {
  read_in_small_pages(0, kFileBytes);
  map_file();
  const int64_t small = bytes_in_small_pages(map_, kFileBytes);
  if (small < 0) GTEST_SKIP() << "this kernel cannot say which pages are mapped huge (PAGEMAP_SCAN)";
  ASSERT_EQ(size_t(small), kFileBytes);
  const HugePageReread r = reread(kFileBytes);
  EXPECT_TRUE(r.measured);
  EXPECT_EQ(r.reread, 0u);
  EXPECT_NE(r.stopped.find("nothing of it is in 2 MiB pages"), std::string::npos) << r.stopped;
  EXPECT_EQ(r.small_after, kFileBytes);
  expect_contents();
}

TEST_F(HugePages, NothingIsReadFromAMappingOffTheTwoMiBGrid) {
  // An address 4 KiB past a 2 MiB boundary, inside a reservation of our own.
  void* reserve = ::mmap(nullptr, kFileBytes + 2 * kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(reserve, MAP_FAILED);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(reserve) + kHuge - 1) / kHuge * kHuge;
  map_file(reinterpret_cast<void*>(aligned + 4096));
  if (bytes_in_small_pages(map_, kFileBytes) < 0) {
    ::munmap(reserve, kFileBytes + 2 * kHuge);
    map_ = nullptr;
    GTEST_SKIP() << "this kernel cannot say which pages are mapped huge (PAGEMAP_SCAN)";
  }
  const HugePageReread r = reread(kFileBytes);
  EXPECT_TRUE(r.measured);
  EXPECT_EQ(r.reread, 0u);
  EXPECT_NE(r.stopped.find("not aligned to 2 MiB"), std::string::npos) << r.stopped;
  expect_contents();
  ::munmap(reserve, kFileBytes + 2 * kHuge);  // the file mapping inside it too
  map_ = nullptr;
}

TEST_F(HugePages, EmptyRangeIsLeftAlone) {
  map_file();
  const HugePageReread r = reread(0);
  EXPECT_FALSE(r.measured);
  EXPECT_EQ(r.reread, 0u);
}

}  // namespace
}  // namespace gem4
