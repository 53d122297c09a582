#include "generate/media_span.h"

#include <algorithm>
#include <cstring>

namespace gem4::generate {

uint64_t media_hash(const std::vector<float>& embd) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(embd.data());
  for (size_t i = 0; i < embd.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

int media_common_prefix(const std::vector<MediaSpan>& cached, const std::vector<MediaSpan>& wanted, int n) {
  // A span that starts inside the prefix must be in both, unchanged; the prefix ends where one is not.
  for (const auto* list : {&wanted, &cached}) {
    const auto& other = list == &wanted ? cached : wanted;
    for (const MediaSpan& s : *list) {
      if (s.first >= n) continue;
      const bool found =
          std::any_of(other.begin(), other.end(), [&](const MediaSpan& o) { return o.same_as(s); });
      if (!found) n = s.first;
    }
  }
  return n;
}

std::vector<int32_t> media_keyed_tokens(const std::vector<int32_t>& tokens,
                                        const std::vector<MediaSpan>& spans) {
  std::vector<int32_t> keyed = tokens;
  for (const MediaSpan& s : spans) {
    for (int i = 0; i < s.count && s.first + i < int(keyed.size()); ++i) {
      uint64_t h = s.hash ^ (uint64_t(uint32_t(s.first)) << 32) ^ uint64_t(uint32_t(i)) ^
                   (s.bidirectional ? 1ull << 63 : 0);
      // splitmix64's finaliser: neighbouring indices give unrelated ids.
      h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ULL, h ^= h >> 27, h *= 0x94d049bb133111ebULL, h ^= h >> 31;
      keyed[size_t(s.first + i)] = int32_t(uint32_t(h) | 0x80000000u);
    }
  }
  return keyed;
}

}  // namespace gem4::generate
