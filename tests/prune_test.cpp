// The pruned execution plan against the unpruned one (spec section 3): logits of every output row
// must agree to float rounding for any micro-batch size, prompt length, output placement, and with
// two sequences in one batch. Run on a generated tiny model and on the trained tiny model.
#include <gtest/gtest.h>

#include <random>

#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/generator.h"
#include "model/model.h"
#include "test_util.h"

namespace gem4 {
namespace {

enum class Outputs { End, Middle, None };

struct Case {
  int len;
  int ubatch;  // 0: one shot
  Outputs outputs;
};

std::vector<int32_t> tokens_for(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  t[0] = 2;
  for (int i = 1; i < n; ++i) t[i] = int32_t(4 + rng() % uint64_t(n_vocab - 4));
  return t;
}

// Runs a prompt (output rows by `which`) and then one decode step that always has logits, so an
// output-free prompt is still checked through the cache it left behind. Returns all logits rows.
std::vector<float> run_case(const Model& m, const Case& c, bool prune, ThreadPool* pool, int n_seqs = 1) {
  const int V = int(m.weights.token_embd.out);
  const int ub = c.ubatch > 0 ? c.ubatch : c.len * n_seqs + 1;
  KvCache kv(m.config, c.len + 2, n_seqs, ub, KvType::F32);
  Forward f(m, pool);
  f.ubatch = ub;
  f.switches.prune = prune;
  Batch b;
  for (int s = 0; s < n_seqs; ++s) {
    const auto toks = tokens_for(c.len, V, 100 + s);
    for (int i = 0; i < c.len; ++i) {
      bool out = false;
      if (c.outputs == Outputs::End) out = i == c.len - 1;
      if (c.outputs == Outputs::Middle) out = i == c.len / 2 || i == c.len / 3;
      b.push_back({toks[i], i, s, out, false});
    }
  }
  // Interleave the sequences row by row so both appear in every micro-batch.
  if (n_seqs == 2) {
    Batch mixed;
    for (int i = 0; i < c.len; ++i) {
      mixed.push_back(b[i]);
      mixed.push_back(b[c.len + i]);
    }
    b = mixed;
  }
  ForwardOutputs out;
  f.run(b, kv, out);
  Batch step;
  for (int s = 0; s < n_seqs; ++s) step.push_back({int32_t(7 + s), c.len, s, true, false});
  f.run(step, kv, out);
  EXPECT_EQ(out.logits.size() % size_t(V), 0u);
  return out.logits;
}

void check_model(const Model& m, int window, int K) {
  ThreadPool pool(2);
  const int V = int(m.weights.token_embd.out);
  std::vector<int> lens = {1, K, 2 * window + 5};
  std::vector<int> ubatches = {1, 3, 64, 0};
  for (int len : lens) {
    std::vector<float> one_shot;
    for (int ub : ubatches) {
      for (Outputs o : {Outputs::End, Outputs::Middle, Outputs::None}) {
        if (test::quick_mode() && ub == 1 && len > 32) continue;
        const Case c{len, ub, o};
        SCOPED_TRACE("len " + std::to_string(len) + " ubatch " + std::to_string(ub) + " outputs " + std::to_string(int(o)));
        const auto pruned = run_case(m, c, true, &pool);
        const auto full = run_case(m, c, false, &pool);
        ASSERT_EQ(pruned.size(), full.size());
        for (size_t r = 0; r < pruned.size() / V; ++r)
          EXPECT_LE(test::max_rel_diff(pruned.data() + r * V, full.data() + r * V, V), 1e-6) << "row " << r;
        if (o == Outputs::End) {
          // Any chunking equals one shot, up to the rounding of a different summation order.
          if (ub == 0) {
            one_shot = full;
          } else if (!one_shot.empty()) {
            EXPECT_LE(test::max_rel_diff(pruned.data(), one_shot.data(), one_shot.size()), 1e-4);
          }
        }
      }
    }
    // Two sequences in one batch, each with its own output rows.
    for (int ub : {3, 0}) {
      SCOPED_TRACE("two sequences, len " + std::to_string(len) + " ubatch " + std::to_string(ub));
      const Case c{len, ub, Outputs::Middle};
      const auto pruned = run_case(m, c, true, &pool, 2);
      const auto full = run_case(m, c, false, &pool, 2);
      ASSERT_EQ(pruned.size(), full.size());
      for (size_t r = 0; r < pruned.size() / V; ++r)
        EXPECT_LE(test::max_rel_diff(pruned.data() + r * V, full.data() + r * V, V), 1e-6) << "row " << r;
      // Each sequence alone gives the same logits as inside the pair.
      const auto single = run_case(m, c, true, &pool, 1);
      const size_t rows_single = single.size() / V;
      // In the pair, rows come in batch order: prompt outputs interleaved, then the two decode rows.
      ASSERT_EQ(pruned.size() / V, rows_single * 2);
      EXPECT_LE(test::max_rel_diff(pruned.data() + (pruned.size() / V - 2) * V, single.data() + (rows_single - 1) * V, V), 1e-4);
    }
  }
}

TEST(Prune, GeneratedTinyModelMatchesUnpruned) {
  GeneratorSpec spec;
  spec.preset = "tiny";
  auto m = generate_model(spec, nullptr);
  check_model(*m, m->config.sliding_window, m->config.first_shared);
}

TEST(Prune, TrainedTinyModelMatchesUnpruned) {
  auto m = Model::load(test::testdata("tiny-gemma4/tiny-gemma4-f32.gguf"));
  check_model(*m, m->config.sliding_window, m->config.first_shared);
}

TEST(Prune, OutputFreeMicroBatchesSkipTheTail) {
  GeneratorSpec spec;
  auto m = generate_model(spec, nullptr);
  KvCache kv(m->config, 64, 1, 8, KvType::F32);
  Forward f(*m, nullptr);
  f.ubatch = 8;
  Batch b;
  for (int i = 0; i < 40; ++i) b.push_back({int32_t(10 + i), i, 0, i == 39, false});
  ForwardOutputs out;
  f.run(b, kv, out);
  EXPECT_EQ(f.stats.micro_batches, 5);
  EXPECT_EQ(f.stats.skipped_tails, 4);  // only the last micro-batch has an output row
  EXPECT_EQ(f.stats.tail_rows, int64_t(m->config.n_kv_shared));  // one row through each shared layer
  EXPECT_EQ(kv.seq_len(0), 40);
}

}  // namespace
}  // namespace gem4
