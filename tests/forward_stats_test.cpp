// The forward pass's counters: the per-kind product breakdown that `gem4 bench --products` prints adds
// up to the totals the roofline uses.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/generator.h"
#include "model/model.h"

namespace gem4 {
namespace {

// Products sharing an input (the E-models' q/k/v, gate/up) and independent ones at one barrier (the
// MoE's dense down with the experts).
class ForwardStatsOf : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    GeneratorSpec spec;
    spec.preset = GetParam();
    model_ = generate_model(spec, nullptr);
    kv_ = std::make_unique<KvCache>(model_->config, 64, 1, 16, KvType::F16);
    forward_ = std::make_unique<Forward>(*model_, &pool_);
    forward_->ubatch = 16;  // two micro-batches for a 20-row prompt
  }
  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Forward> forward_;
};

TEST_P(ForwardStatsOf, ProductBreakdownAddsUpToTheTotals) {
  Forward& f = *forward_;
  KvCache& kv = *kv_;
  ProductBreakdown products;
  f.breakdown = &products;
  Batch prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back({int32_t(5 + i), i, 0, i == 19, false});
  ForwardOutputs out;
  f.run(prompt, kv, out);
  for (int i = 0; i < 3; ++i) f.run({{int32_t(7 + i), 20 + i, 0, true, false}}, kv, out);

  double seconds = 0, bytes = 0;
  int64_t calls = 0;
  bool some_barrier_ran_several = false;
  for (const auto& [kind, t] : products) {
    EXPECT_GT(t.calls, 0) << kind;
    EXPECT_GT(t.weight_bytes, 0) << kind;
    seconds += t.seconds, bytes += t.weight_bytes, calls += t.calls;
    some_barrier_ran_several |= kind.find(" (") != std::string::npos;
  }
  ASSERT_GT(calls, 0);
  EXPECT_DOUBLE_EQ(bytes, f.stats.weight_bytes);
  EXPECT_NEAR(seconds, f.stats.matmul_seconds, 1e-9 * f.stats.matmul_seconds + 1e-12);
  EXPECT_TRUE(some_barrier_ran_several) << "q/k/v or gate/up share a barrier in every Gemma 4 layer";

  // Unset, nothing more is recorded.
  f.breakdown = nullptr;
  f.run({{9, 23, 0, true, false}}, kv, out);
  int64_t after = 0;
  for (const auto& [kind, t] : products) after += t.calls;
  EXPECT_EQ(after, calls);
}

// With `streamed` set, a decoded token's products list the weight bytes they stream, one non-empty span
// per product: together exactly the bytes the stats count (the MoE: the selected experts only), and
// nothing more once it is unset.
TEST_P(ForwardStatsOf, StreamedSpansAreTheBytesCounted) {
  Forward& f = *forward_;
  KvCache& kv = *kv_;
  ForwardOutputs out;
  f.run({{5, 0, 0, true, false}}, kv, out);
  std::vector<ByteSpan> spans;
  f.streamed = &spans;
  f.stats.reset();
  f.run({{6, 1, 0, true, false}}, kv, out);
  double bytes = 0;
  for (const ByteSpan& s : spans) {
    EXPECT_NE(s.data, nullptr);
    EXPECT_GT(s.size, 0u);
    bytes += double(s.size);
  }
  EXPECT_GT(spans.size(), size_t(model_->config.n_layer));
  EXPECT_DOUBLE_EQ(bytes, f.stats.weight_bytes);
  f.streamed = nullptr;
  const size_t n = spans.size();
  f.run({{7, 2, 0, true, false}}, kv, out);
  EXPECT_EQ(spans.size(), n);
}

// With `breakdown` and `streamed` both set, each kind keeps the spans its products streamed: together its
// bytes, and the whole token's spans in all; with `streamed` unset it keeps none.
TEST_P(ForwardStatsOf, BreakdownKeepsEachKindsSpansWhileStreamed) {
  Forward& f = *forward_;
  KvCache& kv = *kv_;
  ForwardOutputs out;
  f.run({{5, 0, 0, true, false}}, kv, out);
  ProductBreakdown products;
  std::vector<ByteSpan> spans;
  f.breakdown = &products;
  f.streamed = &spans;
  f.run({{6, 1, 0, true, false}}, kv, out);
  f.streamed = nullptr;
  size_t kept = 0;
  for (const auto& [kind, t] : products) {
    double bytes = 0;
    for (const ByteSpan& s : t.spans) bytes += double(s.size);
    EXPECT_DOUBLE_EQ(bytes, t.weight_bytes) << kind;
    kept += t.spans.size();
  }
  EXPECT_EQ(kept, spans.size());
  ProductBreakdown later;
  f.breakdown = &later;
  f.run({{7, 2, 0, true, false}}, kv, out);
  f.breakdown = nullptr;
  ASSERT_FALSE(later.empty());
  for (const auto& [kind, t] : later) EXPECT_TRUE(t.spans.empty()) << kind;
}

INSTANTIATE_TEST_SUITE_P(Presets, ForwardStatsOf, ::testing::Values("tiny", "tiny-moe"),
                         [](const auto& info) {
                           return std::string(info.param) == "tiny" ? "Tiny" : "TinyMoe";
                         });

}  // namespace
}  // namespace gem4
