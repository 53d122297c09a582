// FNV-1a, 64-bit: a small, stable hash of bytes (not for security). Used where a value must be the same
// in every build and on every machine: seeds of generated weights, fingerprints of packed layouts, the
// checks of the packed-weight cache.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gem4 {

constexpr uint64_t kFnv1aOffsetBasis = 0xcbf29ce484222325ull;

// Continues the hash `h` over n bytes at data (start with kFnv1aOffsetBasis).
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnv1aOffsetBasis) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace gem4
