// The attention value kernel against its scalar reference: bit for bit on every kernel set the CPU
// runs and for F32, F16 and BF16 value rows, over random and edge shapes (widths not a multiple of 8,
// 16 or 32, no key, one key, one row, more rows than a tile of either vector set); F16/BF16 rows give
// the bits of their f32 conversions; infinities and NaN in the value rows propagate as in the
// reference.
#include "kernels/attention_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "isa_override.h"
#include "kernels/cpu_features.h"
#include "tensor/quant.h"

namespace gem4 {
namespace {

using test::IsaOverride;

TEST(AttentionOps, WeightedValueSumMatchesReferenceExactly) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int width : {1, 7, 8, 9, 15, 16, 17, 24, 33, 64, 256}) {
      for (int n_rows : {1, 3, 4, 5, 8, 11}) {
        for (int64_t nk : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{130}}) {
          const int64_t v_col = 3, row_len = v_col + width + 2;
          // Value rows scattered in memory (as in a sliding ring), in `type` and converted to f32.
          std::vector<std::vector<float>> rows32(static_cast<size_t>(nk), std::vector<float>(row_len));
          std::vector<std::vector<uint16_t>> rows16(static_cast<size_t>(nk), std::vector<uint16_t>(row_len));
          std::vector<const void*> v, v32;
          for (int64_t j = 0; j < nk; ++j) {
            for (int64_t i = 0; i < row_len; ++i) {
              const float x = normal(rng);
              if (type == GgmlType::F16) {
                rows16[j][i] = fp32_to_fp16(x);
                rows32[j][i] = fp16_to_fp32(rows16[j][i]);
              } else if (type == GgmlType::BF16) {
                rows16[j][i] = fp32_to_bf16(x);
                rows32[j][i] = bf16_to_fp32(rows16[j][i]);
              } else {
                rows32[j][i] = x;
              }
            }
            v.push_back(type == GgmlType::F32 ? static_cast<const void*>(rows32[j].data())
                                              : rows16[j].data());
            v32.push_back(rows32[j].data());
          }
          const int64_t ldp = nk + 4, ldo = width + 5;
          std::vector<float> p(size_t(n_rows * ldp));
          for (float& x : p) x = (rng() % 5 == 0) ? 0.0f : std::fabs(normal(rng));
          std::vector<float> want(size_t(n_rows * ldo), 9.0f), got = want, as_f32 = want;
          weighted_value_sum_reference(p.data(), ldp, n_rows, type, v.data(), v_col, nk, width, want.data(),
                                       ldo);
          weighted_value_sum_reference(p.data(), ldp, n_rows, GgmlType::F32, v32.data(), v_col, nk, width,
                                       as_f32.data(), ldo);
          ASSERT_EQ(0, std::memcmp(want.data(), as_f32.data(), want.size() * sizeof(float)));
          for (Isa isa : kAllIsas) {
            if (!isa_supported(isa)) continue;
            IsaOverride o(isa);
            std::fill(got.begin(), got.end(), 9.0f);
            weighted_value_sum(p.data(), ldp, n_rows, type, v.data(), v_col, nk, width, got.data(), ldo);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << ggml_type_name(type) << " width=" << width << " rows=" << n_rows << " nk=" << nk
                << " isa=" << isa_name(active_isa());
          }
        }
      }
    }
  }
}

// Infinite and NaN values (and infinite weights): every set gives the reference's results, NaN where
// it has NaN (the payload may differ with the FMA operand order) and the same bits elsewhere.
TEST(AttentionOps, WeightedValueSumNonFinite) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const int width = 40, n_rows = 5;
  const int64_t nk = 9;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    std::vector<std::vector<float>> rows32(nk, std::vector<float>(width));
    std::vector<std::vector<uint16_t>> rows16(nk, std::vector<uint16_t>(width));
    std::vector<const void*> v;
    for (int64_t j = 0; j < nk; ++j) {
      for (int i = 0; i < width; ++i) {
        float x = normal(rng);
        if (j == 2 && i % 5 == 0) x = inf;
        if (j == 4 && i % 7 == 1) x = -inf;
        if (j == 6 && i % 11 == 3) x = nan;
        rows32[j][i] = x;
        rows16[j][i] = type == GgmlType::F16 ? fp32_to_fp16(x) : fp32_to_bf16(x);
      }
      v.push_back(type == GgmlType::F32 ? static_cast<const void*>(rows32[j].data()) : rows16[j].data());
    }
    std::vector<float> p(size_t(n_rows * nk));
    for (float& x : p) x = std::fabs(normal(rng));
    p[0 * nk + 2] = 0.0f;  // 0 * inf: NaN
    p[1 * nk + 3] = inf;   // an infinite weight
    p[2 * nk + 5] = -inf;
    std::vector<float> want(size_t(n_rows * width)), got(want.size());
    weighted_value_sum_reference(p.data(), nk, n_rows, type, v.data(), 0, nk, width, want.data(), width);
    for (Isa isa : kAllIsas) {
      if (!isa_supported(isa)) continue;
      IsaOverride o(isa);
      weighted_value_sum(p.data(), nk, n_rows, type, v.data(), 0, nk, width, got.data(), width);
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << i << " isa=" << isa_name(isa);
        } else {
          ASSERT_EQ(0, std::memcmp(&want[i], &got[i], sizeof(float))) << i << " isa=" << isa_name(isa);
        }
      }
    }
  }
}

TEST(AttentionOps, ReferenceIsTheWeightedSum) {
  const float v0[] = {1, 2, 3}, v1[] = {10, 20, 30};
  const void* v[] = {v0, v1};
  const float p[] = {0.25f, 0.75f};
  float out[3];
  weighted_value_sum_reference(p, 2, 1, GgmlType::F32, v, 1, 2, 2, out, 3);  // columns 1..2 of each row
  EXPECT_FLOAT_EQ(out[0], 0.25f * 2 + 0.75f * 20);
  EXPECT_FLOAT_EQ(out[1], 0.25f * 3 + 0.75f * 30);
  EXPECT_THROW(weighted_value_sum(p, 2, 1, GgmlType::Q8_0, v, 1, 2, 2, out, 3), std::logic_error);
}

}  // namespace
}  // namespace gem4
