// The attention value kernel against its scalar reference: bit for bit on every ISA, over random and
// edge shapes (widths not a multiple of 16 or 32, one key, one row, more rows than a tile).
#include "kernels/attention_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"

namespace gem4 {
namespace {

struct IsaOverride {
  explicit IsaOverride(Isa isa) { set_isa_override(isa); }
  ~IsaOverride() { clear_isa_override(); }
};

TEST(AttentionOps, WeightedValueSumMatchesReferenceExactly) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int width : {1, 7, 16, 33, 64, 256}) {
    for (int n_rows : {1, 3, 8, 11}) {
      for (int64_t nk : {int64_t{1}, int64_t{5}, int64_t{130}}) {
        const int64_t v_col = 3, row_len = v_col + width + 2;
        // Value rows scattered in memory (as in a sliding ring), probabilities with exact zeros.
        std::vector<std::vector<float>> rows(static_cast<size_t>(nk), std::vector<float>(row_len));
        std::vector<const float*> v;
        for (auto& r : rows) {
          for (float& x : r) x = normal(rng);
          v.push_back(r.data());
        }
        const int64_t ldp = nk + 4, ldo = width + 5;
        std::vector<float> p(static_cast<size_t>(n_rows * ldp));
        for (float& x : p) x = (rng() % 5 == 0) ? 0.0f : std::fabs(normal(rng));
        std::vector<float> want(static_cast<size_t>(n_rows * ldo), 9.0f), got = want;
        weighted_value_sum_reference(p.data(), ldp, n_rows, v.data(), v_col, nk, width, want.data(), ldo);
        for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
          IsaOverride o(isa);
          std::fill(got.begin(), got.end(), 9.0f);
          weighted_value_sum(p.data(), ldp, n_rows, v.data(), v_col, nk, width, got.data(), ldo);
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
              << "width=" << width << " rows=" << n_rows << " nk=" << nk << " isa=" << isa_name(active_isa());
        }
      }
    }
  }
}

TEST(AttentionOps, ReferenceIsTheWeightedSum) {
  const float v0[] = {1, 2, 3}, v1[] = {10, 20, 30};
  const float* v[] = {v0, v1};
  const float p[] = {0.25f, 0.75f};
  float out[3];
  weighted_value_sum_reference(p, 2, 1, v, 1, 2, 2, out, 3);  // columns 1..2 of each value row
  EXPECT_FLOAT_EQ(out[0], 0.25f * 2 + 0.75f * 20);
  EXPECT_FLOAT_EQ(out[1], 0.25f * 3 + 0.75f * 30);
}

}  // namespace
}  // namespace gem4
