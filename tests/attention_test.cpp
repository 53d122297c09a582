// Attention over a KV cache slot (model/attention.h) with many query rows at once on two threads, as a
// prompt's micro-batch runs it (blocks of rows scored together, value sums taken run by run of keys
// across a block's rows, a single task's columns split among the threads), against each row attended
// alone on one thread: the same bits, for every cache type, full and sliding layers, with and without
// mask cropping, ranges long enough to take several runs of keys, micro-batches that start in the
// middle of the cached positions (one of 5 rows: with one KV head a single task); BF16 keys with and
// without the bf16 dot product (where the CPU has it, the query is rounded to bf16 on both paths).
#include "model/attention.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "model/generator.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace gem4 {
namespace {

TEST(Attention, PromptRowsTogetherGiveEachRowAloneTheSameBits) {
  GeneratorSpec spec;
  spec.preset = "small-moe";  // head widths 64 and 128: a single task splits its 128 columns
  const auto m = generate_model(spec, nullptr);
  const ModelConfig& c = m->config;
  ThreadPool pool(2);
  constexpr int kPositions = 300;  // past two runs of keys (attention.cpp: kValueKeys = 128)
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16, KvType::Q8_0}) {
    KvCache kv(c, kPositions, 1, kPositions, type);
    // The first full and the first sliding layer that own their cache, with random K/V everywhere.
    int layers[2] = {-1, -1};
    for (int l = 0; l < c.n_layer; ++l) {
      const LayerConfig& L = c.layers[size_t(l)];
      if (L.owns_kv && layers[L.sliding ? 1 : 0] < 0) layers[L.sliding ? 1 : 0] = l;
    }
    ASSERT_GE(layers[0], 0);
    ASSERT_GE(layers[1], 0);
    for (int l : layers) {
      const LayerConfig& L = c.layers[size_t(l)];
      const int width = kv.row_width(L.kv_slot);
      std::vector<float> k(static_cast<size_t>(width)), v(static_cast<size_t>(width));
      for (int p = 0; p < kPositions; ++p) {
        for (float& x : k) x = normal(rng);
        for (float& x : v) x = normal(rng);
        kv.write(L.kv_slot, 0, p, k.data(), v.data());
      }
    }
    const int kv_len[1] = {kPositions};
    for (int l : layers) {
      const LayerConfig& L = c.layers[size_t(l)];
      // The layer's KV heads, and its first KV head alone with its query heads (as E2B/E4B, one KV
      // head: a micro-batch of up to 8 rows is then one task, which splits its columns among threads).
      for (int kv_heads : {L.n_kv_heads, 1}) {
        const int n_head = kv_heads == 1 ? c.n_head / L.n_kv_heads : c.n_head;
        const AttentionShape shape{n_head, kv_heads, L.head_dim, L.sliding ? c.sliding_window : 0};
        const int qw = n_head * L.head_dim;
        for (Bf16Dot dot : {Bf16Dot::Auto, Bf16Dot::On, Bf16Dot::Off}) {
          if (type != KvType::BF16 && dot != Bf16Dot::Auto) continue;
          const struct Bf16DotMode {
            explicit Bf16DotMode(Bf16Dot m) { set_bf16_dot(m); }
            ~Bf16DotMode() { set_bf16_dot(Bf16Dot::Auto); }
          } mode(dot);
          for (bool crop : {true, false}) {
            for (int first : {0, 181, 295}) {  // a whole prompt, micro-batches over cached positions
              SCOPED_TRACE(std::string(kv_type_name(type)) +
                           (type == KvType::BF16 && bf16_dot_active() ? " bf16 dot" : "") +
                           (L.sliding ? " sliding" : " full") + " kv heads " + std::to_string(kv_heads) +
                           (crop ? " cropped" : " masked") + " rows from " + std::to_string(first));
              const int n = kPositions - first;
              std::vector<int32_t> pos(static_cast<size_t>(n)), seq(static_cast<size_t>(n), 0);
              for (int i = 0; i < n; ++i) pos[size_t(i)] = first + i;
              std::vector<float> q(size_t(n) * qw);
              for (float& x : q) x = normal(rng);
              std::vector<float> together(q.size(), 7.0f), alone(q.size(), 7.0f);
              attend(q.data(), n, pos.data(), seq.data(), shape, kv, L.kv_slot, crop, kv_len, together.data(),
                     &pool);
              for (int i = 0; i < n; ++i) {
                attend(q.data() + size_t(i) * qw, 1, &pos[size_t(i)], &seq[size_t(i)], shape, kv, L.kv_slot,
                       crop, kv_len, alone.data() + size_t(i) * qw, nullptr);
              }
              for (int i = 0; i < n; ++i) {
                ASSERT_EQ(0, std::memcmp(together.data() + size_t(i) * qw, alone.data() + size_t(i) * qw,
                                         size_t(qw) * sizeof(float)))
                    << "row at position " << pos[size_t(i)];
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gem4
