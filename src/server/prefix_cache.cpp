#include "server/prefix_cache.h"

#include <algorithm>
#include <stdexcept>

namespace gem4::server {

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

int reusable_prefix(const SlotCache& s, const std::vector<int32_t>& prompt, const KvCache& kv) {
  if (prompt.empty()) return 0;
  // The last prompt token is recomputed for its logits.
  const int len = int(std::min(common_prefix(s.tokens, prompt), prompt.size() - 1));
  if (len <= 0) return 0;
  if (len < kv.seq_len(s.seq) && !kv.can_truncate(s.seq, len)) return 0;
  return len;
}

PrefixChoice choose_slot(const std::vector<int32_t>& prompt, const std::vector<SlotCache>& slots,
                         const KvCache& kv) {
  PrefixChoice best;
  int best_own = -1;
  int best_source = -1, best_source_len = 0;
  for (int i = 0; i < int(slots.size()); ++i) {
    const int len = reusable_prefix(slots[i], prompt, kv);
    if (len > best_source_len) best_source = i, best_source_len = len;
    if (slots[i].busy) continue;
    if (len > best_own || (len == best_own && slots[i].last_used < slots[best.slot].last_used)) {
      best.slot = i;
      best_own = len;
    }
  }
  if (best.slot < 0) throw std::logic_error("choose_slot: no idle slot");
  if (best_source >= 0 && best_source_len > best_own) {
    best.source = best_source;
    best.reuse = best_source_len;
  } else {
    best.source = best.slot;
    best.reuse = best_own;
  }
  return best;
}

}  // namespace gem4::server
