// Memory for the large tables built at every start: a GGUF file's metadata arrays, the vocabulary's
// string index and merge table, the KV cache, and the packed weights a load makes or reads into memory
// (kernels/packed_matrix.h).
//
// Why: the first touch of each 4 KiB page is a page fault, and on the VMs gem4 is tested on a fault
// costs ~10 us: with the real Gemma 4 vocabulary a `gem4 run` took ~20k of them, 0.2 s of a 0.45 s
// time to first token, most in these tables. Blocks of 2 MiB and more are therefore mapped fresh,
// aligned to 2 MiB and advised into transparent huge pages (one fault per 2 MiB where the kernel's
// THP setting is "madvise" or "always"; where it is "never", 4 KiB pages as before). Blocks of
// 64 KiB and more are mappings of their own too, so nothing zeroes them up front (calloc does when
// it reuses the heap): a page is touched when it is first written, and a KV cache's unused context
// never is. Smaller blocks come from calloc. Either way the memory starts zeroed.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace gem4 {

// Under AddressSanitizer every block comes from calloc, where ASan sees overflows (it does not watch
// memory mapped by hand).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kLargeBlocksMapped = false;
#else
constexpr bool kLargeBlocksMapped = true;
#endif
constexpr size_t kMappedBytes = size_t{64} << 10;     // from this size on: a mapping of its own
constexpr size_t kLargeBlockBytes = size_t{2} << 20;  // from this size on: in huge pages

// Huge: blocks of 2 MiB and more in transparent huge pages, for what is written whole (tables,
// buffers). Small: 4 KiB pages only (advised MADV_NOHUGEPAGE, also where THP is "always"), for what
// is written a little at a time and may stay mostly untouched: a KV cache, where a short prompt's
// first write to each K/V plane of 2 MiB or more made a whole huge page resident.
enum class Pages { Huge, Small };

void* allocate_large(size_t bytes, Pages pages = Pages::Huge);  // zeroed; throws std::bad_alloc
void free_large(void* p, size_t bytes);                         // `bytes` as given to allocate_large

template <class T>
struct LargeAllocator {
  using value_type = T;
  LargeAllocator() = default;
  template <class U>
  LargeAllocator(const LargeAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator does
  T* allocate(size_t n) { return static_cast<T*>(allocate_large(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { free_large(p, n * sizeof(T)); }
  friend bool operator==(const LargeAllocator&, const LargeAllocator&) { return true; }
};

template <class T>
using LargeVector = std::vector<T, LargeAllocator<T>>;
using LargeString = std::basic_string<char, std::char_traits<char>, LargeAllocator<char>>;

}  // namespace gem4
