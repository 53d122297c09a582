// File mappings in 2 MiB pages: finding the parts of a mapping the kernel maps with 4 KiB entries, and
// reading them again so that it maps them with 2 MiB ones.
//
// Why: decode streams every weight byte once per token, and where a packed-weight cache lies in 4 KiB
// pages each page is a TLB miss (a nested page walk in a VM) and a place where the hardware prefetchers
// stop. The kernel maps a file with 2 MiB entries only where its page cache holds the bytes in 2 MiB
// folios, and which folios it makes depends on the memory free at the time: a 26B-A4B cache written or
// read back while the page cache was full came out 4-27 % in small folios (Linux 6.18, ext4, a 23 GiB VM),
// and stayed so for every later load. Measured there, 26B-A4B Q4_0 decode with its cache 27 % in small
// folios: the experts' products at 51-54 % of a plain read of their bytes; the same file after the
// cache was read again wholly in 2 MiB folios: 68 %.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gem4 {

// Bytes of [map, map + bytes) (widened to whole pages) in memory but not mapped by 2 MiB page-table
// entries, or -1 where the kernel cannot tell (the PAGEMAP_SCAN ioctl came with Linux 6.7).
int64_t bytes_in_small_pages(const void* map, size_t bytes);

struct HugePageReread {
  bool measured = false;                     // the kernel said which pages are mapped small
  size_t small_before = 0, small_after = 0;  // bytes in memory outside 2 MiB entries
  size_t reread = 0;                         // bytes dropped from the page cache and read again
  std::string stopped;                       // why it stopped before reading everything small again
};

// For a read-only shared mapping of the whole file open as `fd` (offset 0, MADV_HUGEPAGE advised,
// `bytes` long): every 2 MiB of the mapping with pages in memory not mapped by one entry is unmapped, dropped
// from the page cache (POSIX_FADV_DONTNEED) and read again through the mapping (MADV_POPULATE_READ),
// which makes the kernel read it ahead in one 2 MiB folio where it can. The contents never change (the
// file is clean and the same bytes come back); pages other processes map stay in the page cache as
// they are; pages not in memory are left to fault in when read (a file larger than the memory is not
// read through at load). Stops where the kernel shows it cannot: no 2 MiB entries anywhere in the
// mapping (a kernel or file system without large folios), a mapping not aligned to 2 MiB, or a batch
// read again that came back mostly small (no free 2 MiB blocks, or other processes map them), so a
// load never reads much from disk for nothing.
HugePageReread reread_into_huge_pages(int fd, void* map, size_t bytes);

}  // namespace gem4
