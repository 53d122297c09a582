#include "gguf/huge_pages.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "gguf/file_io.h"

namespace gem4 {

namespace {

// The PAGEMAP_SCAN ioctl of /proc/<pid>/pagemap (Linux 6.7, <linux/fs.h>), declared here because the
// build machines' kernel headers may predate it. Layouts and numbers are the kernel's ABI.
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct PageRegion {
  uint64_t start, end, categories;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);
constexpr uint64_t kPageIsPresent = 1u << 3;  // in memory
constexpr uint64_t kPageIsHuge = 1u << 6;     // mapped by a 2 MiB (PMD) entry, or hugetlb

constexpr uintptr_t kHuge = uintptr_t{2} << 20;

// Which pages a scan reports.
enum class Pages { SmallInMemory, Huge };

// The runs of pages in [begin, end) of the given kind (in memory but not mapped by a 2 MiB entry, or
// mapped by one), asked of `pagemap` (this process's /proc/self/pagemap); false where the kernel
// cannot say.
bool scan(int pagemap, uintptr_t begin, uintptr_t end, Pages kind, std::vector<PageRegion>* runs) {
  runs->clear();
  if (pagemap < 0) return false;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));  // the ioctl takes whole pages only
  begin = begin / page * page;
  end = (end + page - 1) / page * page;
  std::vector<PageRegion> vec(1024);
  while (begin < end) {
    PmScanArg arg{};
    arg.size = sizeof arg;
    arg.start = begin;
    arg.end = end;
    arg.vec = reinterpret_cast<uintptr_t>(vec.data());
    arg.vec_len = vec.size();
    // A page matches when (its categories ^ inverted) & mask == mask.
    if (kind == Pages::SmallInMemory) {
      arg.category_inverted = kPageIsHuge;
      arg.category_mask = kPageIsHuge | kPageIsPresent;
    } else {
      arg.category_mask = kPageIsHuge;
    }
    arg.return_mask = kPageIsHuge | kPageIsPresent;
    const int found = ::ioctl(pagemap, kPagemapScan, &arg);
    if (found < 0) return false;
    runs->insert(runs->end(), vec.begin(), vec.begin() + found);
    if (arg.walk_end <= begin) break;  // no progress: never loop
    begin = arg.walk_end;
  }
  return true;
}

size_t run_bytes(const std::vector<PageRegion>& runs) {
  size_t n = 0;
  for (const PageRegion& r : runs) n += r.end - r.start;
  return n;
}

Fd open_pagemap() { return Fd{::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)}; }

}  // namespace

int64_t bytes_in_small_pages(const void* map, size_t bytes) {
  std::vector<PageRegion> runs;
  const auto begin = reinterpret_cast<uintptr_t>(map);
  const Fd pagemap = open_pagemap();
  if (!scan(pagemap.fd, begin, begin + bytes, Pages::SmallInMemory, &runs)) return -1;
  return int64_t(run_bytes(runs));
}

HugePageReread reread_into_huge_pages(int fd, void* map, size_t bytes) {
  HugePageReread out;
  const auto begin = reinterpret_cast<uintptr_t>(map), end = begin + bytes;
  std::vector<PageRegion> runs;
  const Fd pagemap = open_pagemap();
  if (bytes == 0 || !scan(pagemap.fd, begin, end, Pages::SmallInMemory, &runs)) return out;
  out.measured = true;
  out.small_before = out.small_after = run_bytes(runs);
  if (out.small_before == 0) return out;
  if (begin % kHuge != 0) {
    out.stopped = "the mapping is not aligned to 2 MiB";
    return out;
  }
  std::vector<PageRegion> huge;
  if (!scan(pagemap.fd, begin, end, Pages::Huge, &huge) || huge.empty()) {
    out.stopped = "nothing of it is in 2 MiB pages: no large folios here";
    return out;
  }
  // The whole 2 MiB blocks the small runs touch, in address order, without repeats (the tail past the
  // last whole block can never be mapped huge).
  std::vector<uintptr_t> blocks;
  for (const PageRegion& r : runs) {
    for (uintptr_t b = r.start / kHuge * kHuge; b < r.end && b + kHuge <= end; b += kHuge) {
      if (blocks.empty() || blocks.back() != b) blocks.push_back(b);
    }
  }
  // Batches of up to 32 blocks (64 MiB): after each, whether it came back in 2 MiB pages.
  constexpr size_t kBatch = 32;
  for (size_t i = 0; i < blocks.size(); i += kBatch) {
    const size_t n = std::min(kBatch, blocks.size() - i);
    for (size_t k = i; k < i + n; ++k) {
      void* p = reinterpret_cast<void*>(blocks[k]);
      ::madvise(p, kHuge, MADV_DONTNEED);  // a clean shared file mapping: only our entries go
      ::posix_fadvise(fd, off_t(blocks[k] - begin), off_t(kHuge), POSIX_FADV_DONTNEED);
      ::madvise(p, kHuge, MADV_POPULATE_READ);
    }
    out.reread += n * kHuge;
    size_t still_small = 0;
    for (size_t k = i; k < i + n; ++k) {
      std::vector<PageRegion> left;
      if (scan(pagemap.fd, blocks[k], blocks[k] + kHuge, Pages::SmallInMemory, &left) && !left.empty()) {
        ++still_small;
      }
    }
    if (2 * still_small > n) {
      out.stopped = std::to_string(still_small) + " of " + std::to_string(n) +
                    " blocks read again came back in small pages: no free 2 MiB blocks, or other processes "
                    "map them";
      break;
    }
  }
  scan(pagemap.fd, begin, end, Pages::SmallInMemory, &runs);
  out.small_after = run_bytes(runs);
  return out;
}

}  // namespace gem4
