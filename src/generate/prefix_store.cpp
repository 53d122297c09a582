#include "generate/prefix_store.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "kernels/fnv1a.h"

namespace gem4::generate {

PrefixStore::PrefixStore(const KvCache& kv, size_t budget_bytes, int chunk_tokens)
    : C_(chunk_tokens),
      chunk_bytes_(kv.position_bytes() * size_t(std::max(chunk_tokens, 1))),
      budget_(budget_bytes) {
  if (chunk_tokens < 1) throw std::invalid_argument("PrefixStore: chunk size must be positive");
  stats_.budget = budget_bytes;
}

void PrefixStore::chain_hashes(const std::vector<int32_t>& tokens, int n, std::vector<uint64_t>& out) const {
  out.resize(n);
  uint64_t h = kFnv1aOffsetBasis;
  for (int i = 0; i < n; ++i)
    out[i] = h = fnv1a(tokens.data() + size_t(i) * C_, size_t(C_) * sizeof(int32_t), h);
}

PrefixStore::Chunk* PrefixStore::lookup(uint64_t key, const int32_t* tokens) {
  auto it = chunks_.find(key);
  if (it == chunks_.end() || std::memcmp(it->second.tokens.data(), tokens, size_t(C_) * sizeof(int32_t)) != 0)
    return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second;
}

PrefixStore::Chunk& PrefixStore::put(uint64_t key, const int32_t* tokens) {
  auto [it, fresh] = chunks_.try_emplace(key);
  Chunk& c = it->second;
  if (fresh) {
    lru_.push_front(key);
    c.lru = lru_.begin();
    c.rows.resize(chunk_bytes_);
    stats_.bytes += chunk_bytes_;
    stats_.stored++;
  } else {
    lru_.splice(lru_.begin(), lru_, c.lru);  // a hash collision with other tokens: the newer wins
  }
  c.tokens.assign(tokens, tokens + C_);
  return c;
}

void PrefixStore::evict() {
  while (stats_.bytes > budget_ && !lru_.empty()) {
    chunks_.erase(lru_.back());
    lru_.pop_back();
    stats_.bytes -= chunk_bytes_;
    stats_.evicted++;
  }
}

void PrefixStore::record(const KvCache& kv, int seq, const std::vector<int32_t>& tokens, int from) {
  if (budget_ < chunk_bytes_) return;
  const int len = std::min<int>(kv.seq_len(seq), int(tokens.size()));
  const int n = len / C_;
  const int first = std::max(0, from / C_);  // chunks ending after `from`
  if (first >= n) return;
  const int live = kv.live_from(seq);
  chain_hashes(tokens, n, hashes_);
  for (int i = first; i < n; ++i) {
    if (i * C_ < live) continue;
    const int32_t* t = tokens.data() + size_t(i) * C_;
    if (lookup(hashes_[i], t)) continue;
    Chunk& c = put(hashes_[i], t);
    kv.export_rows(seq, i * C_, (i + 1) * C_, c.rows.data());
  }
  evict();
}

int PrefixStore::resumable(const KvCache& kv, int seq, const std::vector<int32_t>& tokens, int limit,
                           int held) {
  limit = std::min<int>(limit, int(tokens.size()));
  const int n = limit / C_;
  if (n == 0) return 0;
  const int len = kv.seq_len(seq);
  held = std::clamp(held, 0, len);
  const int live = kv.live_from(seq);  // the sequence's own rows [live, held) serve the rings
  const int W = kv.ring_window();
  chain_hashes(tokens, n, hashes_);
  std::vector<char> have(n, 0);  // 1: stored, -1: looked up and missing
  auto stored = [&](int i) {
    if (!have[i]) have[i] = lookup(hashes_[i], tokens.data() + size_t(i) * C_) ? 1 : -1;
    return have[i] > 0;
  };
  for (int j = n; j >= 1; --j) {
    const int p = j * C_;
    bool ok = true;
    for (int i = held / C_; i < j && ok; ++i) ok = (i + 1) * C_ <= held || stored(i);
    if (ok && W > 0) {
      // The ring window [p - W + 1, p): positions outside the sequence's own [live, held) need chunks.
      const int ws = std::max(0, p - W + 1);
      for (int i = ws / C_; i < j && ok; ++i) {
        const int b = std::max(i * C_, ws), e = (i + 1) * C_;
        if (b >= live && e <= held) continue;
        ok = stored(i);
      }
    }
    if (ok) return p;
  }
  return 0;
}

void PrefixStore::restore(KvCache& kv, int seq, const std::vector<int32_t>& tokens, int p, int held) {
  if (p % C_ != 0 || p > int(tokens.size()))
    throw std::invalid_argument("PrefixStore::restore: bad prefix length");
  const int len = kv.seq_len(seq);
  held = std::clamp(held, 0, len);
  const int live = kv.live_from(seq);
  const int W = kv.ring_window();
  const int ws = W > 0 ? std::max(0, p - W + 1) : INT_MAX;
  const int n = p / C_;
  chain_hashes(tokens, n, hashes_);
  for (int i = std::min(held, ws) / C_; i < n; ++i) {
    const int b = i * C_, e = b + C_;
    const int full_from = e <= held ? INT_MAX : std::max(b, held);
    // Ring rows: only the window, and only where the sequence's own rows do not already serve.
    int ring_from = INT_MAX;
    if (W > 0 && e > ws && !(std::max(b, ws) >= live && e <= held)) ring_from = std::max(b, ws);
    if (full_from == INT_MAX && ring_from == INT_MAX) continue;
    const Chunk* c = lookup(hashes_[i], tokens.data() + size_t(b));
    if (!c) throw std::logic_error("PrefixStore::restore: chunk " + std::to_string(i) + " is not stored");
    kv.import_rows(seq, b, e, c->rows.data(), full_from, ring_from);
  }
  kv.set_restored(seq, p, W > 0 ? std::max(ws == INT_MAX ? 0 : ws, 0) : 0);
  stats_.restores++;
  stats_.restored_tokens += p;
}

const uint8_t* PrefixStore::find(const std::vector<int32_t>& tokens, int i) {
  if (int(tokens.size()) < (i + 1) * C_) return nullptr;
  chain_hashes(tokens, i + 1, hashes_);
  const Chunk* c = lookup(hashes_[i], tokens.data() + size_t(i) * C_);
  return c ? c->rows.data() : nullptr;
}

void PrefixStore::insert(const std::vector<int32_t>& tokens, int i, const uint8_t* rows) {
  if (budget_ < chunk_bytes_ || int(tokens.size()) < (i + 1) * C_) return;
  chain_hashes(tokens, i + 1, hashes_);
  Chunk& c = put(hashes_[i], tokens.data() + size_t(i) * C_);
  std::memcpy(c.rows.data(), rows, chunk_bytes_);
  evict();
}

PrefixStoreStats PrefixStore::stats() const {
  PrefixStoreStats s = stats_;
  s.chunks = int64_t(chunks_.size());
  return s;
}

}  // namespace gem4::generate
