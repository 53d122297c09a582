// The shared decoder-layer math (model/block.h) and the plan's pruning cut (model/batch.h).
//
// References, none computed by the code under test: the MLP steps 8-11 of spec 2.4 written out here
// in double precision from the raw weights; the cut points of spec 3.2 (optimal: inside layer K-1
// after its K/V write; simple: at the input of layer K; none: before the head).
#include "model/block.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/batch.h"
#include "model/generator.h"
#include "test_util.h"

namespace gem4 {
namespace {

TEST(Block, PlanCutsAfterTheLastKvWrite) {
  auto m = generate_model(GeneratorSpec{}, nullptr);
  const ModelConfig& c = m->config;
  ASSERT_GT(c.n_kv_shared, 0);
  const int K = c.first_shared, L = c.n_layer;
  Batch b;
  for (int i = 0; i < 10; ++i) b.push_back({int32_t(5 + i), i, 0, i == 9, false});

  PlanSwitches sw;
  const auto optimal = plan_batch(b, 4, c, sw);
  ASSERT_EQ(optimal.size(), 3u);
  EXPECT_FALSE(optimal[0].has_outputs());
  EXPECT_EQ(optimal[2].keep, std::vector<int>{1});
  EXPECT_EQ(optimal[0].cut.layer, K - 1);
  EXPECT_TRUE(optimal[0].cut.after_kv);
  EXPECT_EQ(optimal[0].cut.half(), 2 * (K - 1) + 1);
  EXPECT_EQ(optimal[0].ple_split, K - 1);

  sw.optimal_cut = false;
  const auto simple = plan_batch(b, 4, c, sw);
  EXPECT_EQ(simple[0].cut.layer, K);
  EXPECT_FALSE(simple[0].cut.after_kv);
  EXPECT_EQ(simple[0].ple_split, K);

  sw.ple_crop = false;
  EXPECT_EQ(plan_batch(b, 4, c, sw)[0].ple_split, L);

  sw.ple_crop = true;
  sw.prune = false;
  const auto none = plan_batch(b, 4, c, sw);
  EXPECT_EQ(none[0].cut.layer, L);
  EXPECT_FALSE(none[0].cut.after_kv);
  EXPECT_EQ(none[0].ple_split, L);
}

std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

// y = W x for a weight of ne [in, out], from its rows.
std::vector<double> matvec_ref(const MatrixView& w, const std::vector<double>& x) {
  std::vector<float> row(w.in);
  std::vector<double> y(w.out);
  for (int64_t o = 0; o < w.out; ++o) {
    matrix_get_row(w, o, row.data());
    double s = 0;
    for (int64_t i = 0; i < w.in; ++i) s += double(row[i]) * x[i];
    y[o] = s;
  }
  return y;
}

TEST(Block, MlpFollowsTheSpecWithGateAndUpInOneProduct) {
  auto m = generate_model(GeneratorSpec{}, nullptr);
  const ModelConfig& c = m->config;
  const ModelWeights& w = m->weights;
  const int n = 3, d = c.d_model, l = c.n_layer - 1;
  const LayerWeights& lw = w.layers[l];

  std::vector<int> calls;  // targets per product call
  MatmulHook hook = [&](const MatmulTarget* t, int count, const float* x, int rows, int ldx) {
    calls.push_back(count);
    run_products(t, count, x, rows, ldx, nullptr);
  };
  int groups = 0;  // a dense MLP has no independent products to group
  MatmulGroupHook group = [&](const MatmulJob* jobs, int count) {
    groups++;
    run_group(jobs, count, nullptr);
  };
  BlockBuffers buf;
  buf.resize(n, c);
  const DecoderBlock blk(c, w, nullptr, hook, group, buf);

  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> h(size_t(n) * d);
  for (float& v : h) v = dist(rng);
  const std::vector<float> h0 = h;
  blk.mlp(l, /*exact_gelu=*/true, h.data(), n);
  EXPECT_EQ(calls, (std::vector<int>{2, 1}));  // gate and up share their input; then down
  EXPECT_EQ(groups, 0);

  for (int i = 0; i < n; ++i) {
    std::vector<double> x(h0.begin() + size_t(i) * d, h0.begin() + size_t(i + 1) * d);
    const auto mlp_in = rmsnorm_ref(x, lw.ffn_norm, c.rms_eps);
    const auto gate = matvec_ref(lw.ffn_gate, mlp_in), up = matvec_ref(lw.ffn_up, mlp_in);
    std::vector<double> act(gate.size());
    for (size_t j = 0; j < gate.size(); ++j) {
      const double g = gate[j];
      act[j] = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * up[j];
    }
    const auto out = rmsnorm_ref(matvec_ref(lw.ffn_down, act), lw.post_ffw_norm, c.rms_eps);
    std::vector<float> ref(d);
    for (int k = 0; k < d; ++k) ref[k] = float(x[k] + out[k]);
    EXPECT_LE(test::max_rel_diff(&h[size_t(i) * d], ref.data(), d), 1e-5) << "row " << i;
  }
}

}  // namespace
}  // namespace gem4
