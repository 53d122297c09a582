// The attention value kernel against its scalar reference: bit for bit on every ISA and for F32, F16
// and BF16 value rows, over random and edge shapes (widths not a multiple of 16 or 32, one key, one
// row, more rows than a tile); and F16/BF16 rows give the bits of their f32 conversions.
#include "kernels/attention_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "tensor/quant.h"

namespace gem4 {
namespace {

struct IsaOverride {
  explicit IsaOverride(Isa isa) { set_isa_override(isa); }
  ~IsaOverride() { clear_isa_override(); }
};

TEST(AttentionOps, WeightedValueSumMatchesReferenceExactly) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int width : {1, 7, 16, 33, 64, 256}) {
      for (int n_rows : {1, 3, 8, 11}) {
        for (int64_t nk : {int64_t{1}, int64_t{5}, int64_t{130}}) {
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
            v.push_back(type == GgmlType::F32 ? static_cast<const void*>(rows32[j].data()) : rows16[j].data());
            v32.push_back(rows32[j].data());
          }
          const int64_t ldp = nk + 4, ldo = width + 5;
          std::vector<float> p(size_t(n_rows * ldp));
          for (float& x : p) x = (rng() % 5 == 0) ? 0.0f : std::fabs(normal(rng));
          std::vector<float> want(size_t(n_rows * ldo), 9.0f), got = want, as_f32 = want;
          weighted_value_sum_reference(p.data(), ldp, n_rows, type, v.data(), v_col, nk, width, want.data(), ldo);
          weighted_value_sum_reference(p.data(), ldp, n_rows, GgmlType::F32, v32.data(), v_col, nk, width,
                                       as_f32.data(), ldo);
          ASSERT_EQ(0, std::memcmp(want.data(), as_f32.data(), want.size() * sizeof(float)));
          for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
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
