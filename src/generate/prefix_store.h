// Snapshots of a sequence's K/V, kept so that any cached prefix can be resumed: the in-memory half of
// prompt caching (the on-disk half is generate/prompt_cache_file.h).
//
// Why: a sliding-window layer keeps only a ring of its last (window + max_ubatch) positions. Once a
// sequence has moved on past a prefix (a reply, another user turn), rolling the ring back to the end
// of that prefix is impossible, so a long system prompt shared by many requests would be recomputed
// by each. The store keeps the rows of every KV slot in chunks of C consecutive positions (C = 16):
// chunk i of a token sequence covers positions [i*C, (i+1)*C) and depends only on its first (i+1)*C
// tokens, so it is keyed by a hash of them. Taken together the chunks of a prefix are a snapshot of
// the rings at every chunk boundary, each position stored once: a prefix resumes at the last chunk
// boundary it covers, and only the tokens after it (fewer than C, plus the rest of the prompt) are
// recomputed. C is small because a conversation's next turn diverges from its last sequence a few
// tokens before the end of the last prompt (the template writes past model turns without the empty
// thought block of the generation prompt): with C = 64 a turn resumed from the store recomputed ~30
// tokens more on average, with C = 16 ~8, for 4x more (smaller) chunks.
//
// Memory is bounded by a byte budget; the least recently used chunks go first. A lookup touches the
// whole chain it walks, so the first chunks of a popular prefix stay longest.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "model/kv_cache.h"

namespace gem4::generate {

struct PrefixStoreStats {
  size_t bytes = 0, budget = 0;
  int64_t chunks = 0;
  int64_t stored = 0;    // chunks recorded so far
  int64_t evicted = 0;   // chunks dropped for the budget
  int64_t restores = 0;  // prefixes resumed from chunks
  int64_t restored_tokens = 0;
};

class PrefixStore {
 public:
  // Chunks hold the rows of `kv`'s layout (every KvCache of that model and type shares it).
  PrefixStore(const KvCache& kv, size_t budget_bytes, int chunk_tokens = 16);

  int chunk_tokens() const { return C_; }
  size_t chunk_bytes() const { return chunk_bytes_; }

  // Stores the whole chunks of sequence `seq` that its last write completed: those ending in
  // (from, kv.seq_len(seq)] whose rows the cache still holds. tokens[i] is the token at position i.
  void record(const KvCache& kv, int seq, const std::vector<int32_t>& tokens, int from);

  // The longest prefix of `tokens`, at most `limit` tokens, that sequence `seq` can be brought to:
  // a chunk boundary p such that positions [held, p) of the full slots and the window before p of the
  // rings are either stored or still in the sequence (`held`: how many of tokens' first positions the
  // sequence holds now). Returns 0 when nothing beyond what is cheaper to recompute can be restored.
  int resumable(const KvCache& kv, int seq, const std::vector<int32_t>& tokens, int limit, int held);
  // Brings `seq` to the first p tokens (p from resumable()).
  void restore(KvCache& kv, int seq, const std::vector<int32_t>& tokens, int p, int held);

  // Chunk i of `tokens` (its rows), or nullptr when it is not stored.
  const uint8_t* find(const std::vector<int32_t>& tokens, int i);
  // Adds chunk i of `tokens` from outside (the prompt cache on disk).
  void insert(const std::vector<int32_t>& tokens, int i, const uint8_t* rows);

  PrefixStoreStats stats() const;

 private:
  struct Chunk {
    std::vector<int32_t> tokens;  // the chunk's own C tokens (checked on lookup along with the hash)
    std::vector<uint8_t> rows;
    std::list<uint64_t>::iterator lru;
  };
  // hash of tokens[0, (i+1)*C) for i < n, chained chunk by chunk.
  void chain_hashes(const std::vector<int32_t>& tokens, int n, std::vector<uint64_t>& out) const;
  Chunk* lookup(uint64_t key, const int32_t* tokens);
  Chunk& put(uint64_t key, const int32_t* tokens);
  void evict();

  int C_;
  size_t chunk_bytes_, budget_;
  std::unordered_map<uint64_t, Chunk> chunks_;
  std::list<uint64_t> lru_;  // front: most recently used
  PrefixStoreStats stats_;
  std::vector<uint64_t> hashes_;
};

}  // namespace gem4::generate
