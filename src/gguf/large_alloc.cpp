#include "gguf/large_alloc.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

namespace gem4 {

namespace {
size_t mapped_size(size_t bytes) {
  return (bytes + kLargeBlockBytes - 1) / kLargeBlockBytes * kLargeBlockBytes;
}
}  // namespace

void* allocate_large(size_t bytes, Pages pages) {
  if (!kLargeBlocksMapped || bytes < kMappedBytes) {
    void* p = std::calloc(bytes ? bytes : 1, 1);
    if (!p) throw std::bad_alloc();
    return p;
  }
  if (bytes < kLargeBlockBytes) {  // a mapping of its own: zero pages until written, no memset
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;
  }
  if (pages == Pages::Small) {  // the size free_large unmaps; only touched pages take memory
    const size_t size = mapped_size(bytes);
    if (size < bytes) throw std::bad_alloc();  // overflow
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, size, MADV_NOHUGEPAGE);  // advice, as below
    return p;
  }
  // Map one huge page more than needed and trim both ends, so the block starts on a 2 MiB boundary
  // (older kernels place anonymous mappings on 4 KiB boundaries, where no huge page fits).
  const size_t size = mapped_size(bytes);
  if (size < bytes) throw std::bad_alloc();  // overflow
  void* raw =
      ::mmap(nullptr, size + kLargeBlockBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kLargeBlockBytes - 1) / kLargeBlockBytes * kLargeBlockBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  if (const size_t tail = start + size + kLargeBlockBytes - (aligned + size)) {
    ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  }
  void* p = reinterpret_cast<void*>(aligned);
  ::madvise(p, size, MADV_HUGEPAGE);  // advice: refused or ignored, the block is still usable
  return p;
}

void free_large(void* p, size_t bytes) {
  if (!p) return;
  if (!kLargeBlocksMapped || bytes < kMappedBytes) {
    std::free(p);
  } else if (bytes < kLargeBlockBytes) {
    ::munmap(p, bytes);
  } else {
    ::munmap(p, mapped_size(bytes));
  }
}

}  // namespace gem4
