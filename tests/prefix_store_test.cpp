// The prefix store (generate/prefix_store.h) and the K/V row moves under it (KvCache export/import),
// on the trained tiny Gemma 4 (sliding window 64, so short prompts already wrap the rings).
//
// References, none produced by the code under test: a fresh Session that computes the whole prompt,
// and the plain greedy continuation it gives.
#include "generate/prefix_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "generate/generate.h"
#include "generate/session.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace gem4::generate {
namespace {

std::unique_ptr<Model> tiny() { return Model::load(test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf")); }

SessionOptions options(size_t store_bytes, int ubatch = 8, int n_ctx = 1024) {
  SessionOptions o;
  o.n_ctx = n_ctx;
  o.ubatch = ubatch;
  o.kv_type = KvType::F32;
  o.prefix_store_bytes = store_bytes;
  return o;
}

std::vector<int32_t> random_tokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(2 + rng() % uint64_t(vocab - 2));
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> greedy(Session& s, const std::vector<int32_t>& prompt, int n) {
  s.speculate(nullptr, {});
  return generate_tokens(s, prompt, n).tokens;
}

TEST(KvRows, ExportImportRoundTripAndLiveRange) {
  auto m = tiny();
  KvCache kv(m->config, 512, 2, 8, KvType::F16);
  ASSERT_GT(kv.ring_window(), 0);
  // Fill sequence 0 with recognisable rows through write().
  const int n = 200;
  int n_slots = 0, width = 0;
  for (const auto& L : m->config.layers)
    if (L.owns_kv) n_slots++, width = std::max(width, L.n_kv_heads * L.head_dim);
  std::vector<float> k(width), v(width);
  for (int pos = 0; pos < n; ++pos)
    for (int s = 0; s < n_slots; ++s) {
      for (int j = 0; j < kv.row_width(s); ++j) k[j] = float(pos * 3 + s + j % 7), v[j] = -k[j];
      kv.write(s, 0, pos, k.data(), v.data());
    }
  kv.set_seq_len(0, n);
  // The rings hold the last window + 8 = 72 positions.
  EXPECT_EQ(kv.live_from(0), n - 72);
  std::vector<uint8_t> rows(kv.position_bytes() * 16);
  EXPECT_THROW(kv.export_rows(0, 100, 116, rows.data()), std::out_of_range);
  kv.export_rows(0, 150, 166, rows.data());
  kv.import_rows(1, 150, 166, rows.data(), 0, 0);
  std::vector<float> a(width), b(width);
  for (int s = 0; s < n_slots; ++s) {
    kv.read_k(s, 0, kv.cell_of(s, 160), a.data());
    kv.read_k(s, 1, kv.cell_of(s, 160), b.data());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), kv.row_width(s) * sizeof(float))) << "slot " << s;
  }
  // Rolling back to len needs keys from len - 63 on; the rings hold positions from 128 on.
  EXPECT_TRUE(kv.can_truncate(0, 191));
  EXPECT_FALSE(kv.can_truncate(0, 190));
  // A truncation keeps what the rings held before it: positions [len, cur) overwrote older cells,
  // so after going back to 180 nothing before it can be rolled back to.
  kv.truncate(0, 180);
  EXPECT_EQ(kv.live_from(0), n - 72);
  EXPECT_FALSE(kv.can_truncate(0, 179));
  EXPECT_TRUE(kv.can_truncate(0, 180));
  EXPECT_NE(kv.layout_signature().find("ring"), std::string::npos);
}

// A shared prefix the rings moved past is resumed from the store's chunks, and the result is the
// fresh computation's: same logits, same greedy continuation.
TEST(PrefixStore, ResumesAPrefixTheRingsMovedPast) {
  auto m = tiny();
  ThreadPool pool(1);
  const int V = int(m->weights.token_embd.out);
  const auto shared = random_tokens(200, V, 1);
  const auto a = concat(shared, random_tokens(150, V, 2));
  const auto b = concat(shared, random_tokens(40, V, 3));

  Session with_store(*m, &pool, options(64u << 20));
  Session without(*m, &pool, options(0));
  Session fresh(*m, &pool, options(0));
  EXPECT_EQ(with_store.set_tokens(a), int(a.size()));
  without.set_tokens(a);
  // 150 tokens past the shared prefix: the rings (72 cells) no longer hold its end.
  EXPECT_FALSE(with_store.kv().can_truncate(0, 200));
  const int processed = with_store.set_tokens(b);
  EXPECT_EQ(processed, int(b.size()) - 192) << "resumed at the last chunk boundary inside the prefix";
  EXPECT_EQ(without.set_tokens(b), int(b.size())) << "without a store everything is recomputed";
  fresh.set_tokens(b);
  EXPECT_LT(test::max_rel_diff(with_store.logits(), fresh.logits(), V), 1e-5);
  EXPECT_EQ(greedy(with_store, b, 40), greedy(fresh, b, 40));
  const PrefixStoreStats st = with_store.store()->stats();
  EXPECT_EQ(st.restores, 1);
  EXPECT_GT(st.chunks, 3);
}

// Any chunking of the prompt (a ubatch that does not divide the chunk size) and F16 cells.
TEST(PrefixStore, ResumeMatchesFreshWithOddMicroBatches) {
  auto m = tiny();
  ThreadPool pool(1);
  const int V = int(m->weights.token_embd.out);
  const auto shared = random_tokens(333, V, 4);
  for (int ub : {5, 64, 100}) {
    SessionOptions o = options(64u << 20, ub);
    o.kv_type = KvType::F16;
    Session s(*m, &pool, o);
    s.set_tokens(concat(shared, random_tokens(200, V, 5)));
    const auto b = concat(shared, random_tokens(30, V, 6));
    EXPECT_EQ(s.set_tokens(b), int(b.size()) - 320) << "ubatch " << ub;
    SessionOptions fo = o;
    fo.prefix_store_bytes = 0;
    Session fresh(*m, &pool, fo);
    EXPECT_EQ(greedy(s, b, 24), greedy(fresh, b, 24)) << "ubatch " << ub;
  }
}

// A budget smaller than the prefix keeps the most recently used chunks; what cannot be resumed is
// recomputed, and the answer stays right.
TEST(PrefixStore, BudgetEvictsLeastRecentlyUsed) {
  auto m = tiny();
  ThreadPool pool(1);
  const int V = int(m->weights.token_embd.out);
  Session probe(*m, &pool, options(1u << 20));
  const size_t chunk = probe.store()->chunk_bytes();
  const int C = probe.store()->chunk_tokens(), kept = 192 / C;  // the last 192 positions' chunks
  Session s(*m, &pool, options(kept * chunk));
  const auto shared = random_tokens(400, V, 7);
  s.set_tokens(concat(shared, random_tokens(100, V, 8)));
  const PrefixStoreStats st = s.store()->stats();
  EXPECT_EQ(st.chunks, kept);
  EXPECT_GT(st.evicted, 0);
  EXPECT_LE(st.bytes, st.budget);
  // The sequence still holds the prefix in its full layers' cells: only the ring window before the
  // resume point (the last chunk boundary in the shared 400 tokens) comes from the store, and the
  // chunks kept are the most recent ones.
  const auto b = concat(shared, random_tokens(20, V, 9));
  EXPECT_EQ(s.set_tokens(b), int(b.size()) - 400 / C * C);
  // From an empty sequence the first chunks would be needed too: they are gone, so all is recomputed.
  s.reset();
  EXPECT_EQ(s.set_tokens(b), int(b.size()));
  Session fresh(*m, &pool, options(0));
  EXPECT_EQ(greedy(s, b, 16), greedy(fresh, b, 16));
}

// Chunks keyed by the whole prefix: the same chunk of tokens after a different beginning is not reused.
TEST(PrefixStore, ChunksDependOnTheWholePrefix) {
  auto m = tiny();
  ThreadPool pool(1);
  const int V = int(m->weights.token_embd.out);
  Session s(*m, &pool, options(64u << 20));
  const auto tail = random_tokens(300, V, 10);
  s.set_tokens(concat(random_tokens(64, V, 11), tail));
  const auto other = concat(random_tokens(64, V, 12), tail);
  EXPECT_EQ(s.set_tokens(other), int(other.size()));
  EXPECT_EQ(s.store()->find(other, 0) != nullptr, true);  // now stored for this beginning
}

}  // namespace
}  // namespace gem4::generate
