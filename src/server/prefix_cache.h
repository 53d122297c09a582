// Prefix reuse across slots: which idle slot a new prompt goes to, and which cached prefix (in that
// slot or copied from another) spares recomputing its first tokens.
//
// Every slot is one sequence of a shared KvCache and remembers the tokens whose K/V it holds. A new
// prompt can reuse the longest common prefix with any slot, busy or idle: KvCache::copy_prefix copies
// it into the chosen slot. Sliding-window layers keep only a ring of recent positions, so a prefix
// shorter than what a slot holds is usable only if the ring still has the keys its next position
// needs (KvCache::can_truncate); otherwise that slot offers nothing and the prompt is recomputed.
// The last prompt token is always recomputed, because its logits are needed.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"

namespace gem4::server {

struct SlotCache {
  int seq = 0;                                   // sequence id in the KvCache
  std::span<const int32_t> tokens;               // tokens whose K/V the sequence holds
  bool busy = false;                             // generating for another request (may still be a source)
  uint64_t last_used = 0;                        // higher: used more recently
};

struct PrefixChoice {
  int slot = -1;    // index (into the SlotCache list) of the idle slot that takes the prompt
  int source = -1;  // slot whose K/V supply the reused prefix (== slot: reuse in place)
  int reuse = 0;    // tokens reused (0: process the whole prompt)
};

// Length of the common prefix of a and b.
size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

// How many of `prompt`'s tokens slot `s` can supply (0 if its sliding rings cannot roll back there).
int reusable_prefix(const SlotCache& s, const std::vector<int32_t>& prompt, const KvCache& kv);

// Picks the idle slot for `prompt` (there must be one) and the best prefix to reuse. Among idle
// slots it prefers the one that can reuse the most itself, then the least recently used.
PrefixChoice choose_slot(const std::vector<int32_t>& prompt, const std::vector<SlotCache>& slots,
                         const KvCache& kv);

}  // namespace gem4::server
