// The attention value kernel against its scalar reference: bit for bit on every kernel set the CPU
// runs and for F32, F16, BF16 and Q8_0 value rows, over random and edge shapes (widths not a multiple
// of 8, 16 or 32, no key, one key, one row, more rows than a tile of either vector set); F16/BF16/Q8_0
// rows give the bits of their f32 conversions; infinities and NaN in the value rows propagate as in
// the reference; a key range split into calls that continue the sums gives the bits of one call. The score
// side with Q8_0 keys (a matrix product over cache rows, the query quantized to Q8_0) against a
// double-precision statement of llama.cpp's q8_0 x q8_0 dot product.
#include "kernels/attention_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "isa_override.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"
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
            // The keys split into consecutive calls, each continuing the sums (accumulate): the bits of
            // one call, wherever the splits fall (none before the first key, or none after the last).
            for (int64_t cut : {int64_t{0}, nk / 3, nk}) {
              std::fill(got.begin(), got.end(), 9.0f);
              weighted_value_sum(p.data(), ldp, n_rows, type, v.data(), v_col, cut, width, got.data(), ldo);
              weighted_value_sum(p.data() + cut, ldp, n_rows, type, v.data() + cut, v_col, nk - cut, width,
                                 got.data(), ldo, true);
              ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                  << ggml_type_name(type) << " width=" << width << " rows=" << n_rows << " nk=" << nk
                  << " split at " << cut << " isa=" << isa_name(active_isa());
            }
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
  EXPECT_THROW(weighted_value_sum(p, 2, 1, GgmlType::Q4_0, v, 1, 2, 2, out, 3), std::logic_error);
  // Q8_0 rows are read from a block start on: a head never starts inside a block.
  BlockQ8_0 b{};
  const void* vq[] = {&b, &b};
  EXPECT_THROW(weighted_value_sum(p, 2, 1, GgmlType::Q8_0, vq, 16, 2, 8, out, 8), std::logic_error);
  EXPECT_THROW(weighted_value_sum_reference(p, 2, 1, GgmlType::Q8_0, vq, 8, 2, 8, out, 8), std::logic_error);
}

// Random Q8_0 rows made of raw blocks (any scale bits, including 0 and a subnormal, any int8 including
// -128), each row allocated to its exact length so that a read past it is caught under ASan.
std::vector<BlockQ8_0> random_q8_0_row(int64_t n_blocks, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<BlockQ8_0> row(static_cast<size_t>(n_blocks));
  for (BlockQ8_0& b : row) {
    const uint32_t pick = rng() % 16;
    b.d = pick == 0   ? uint16_t(0)
          : pick == 1 ? uint16_t(0x0001)
                      : fp32_to_fp16(std::fabs(normal(rng)) * 0.05f);
    for (int8_t& q : b.qs) q = static_cast<int8_t>(int(rng() % 256) - 128);
  }
  return row;
}

TEST(AttentionOps, WeightedValueSumQ8_0MatchesReferenceExactly) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t v_col : {int64_t{0}, int64_t{32}, int64_t{64}}) {
    for (int width : {1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 64, 100, 256}) {
      for (int n_rows : {1, 3, 4, 5, 8, 11}) {
        for (int64_t nk : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{130}}) {
          const int64_t n_blocks = (v_col + width + kQK - 1) / kQK;
          std::vector<std::vector<BlockQ8_0>> rows(static_cast<size_t>(nk));
          std::vector<std::vector<float>> rows32(static_cast<size_t>(nk));
          std::vector<const void*> v, v32;
          for (int64_t j = 0; j < nk; ++j) {
            rows[j] = random_q8_0_row(n_blocks, rng);
            rows32[j].resize(size_t(n_blocks * kQK));
            dequantize_row(GgmlType::Q8_0, rows[j].data(), rows32[j].data(), n_blocks * kQK);
            v.push_back(rows[j].data());
            v32.push_back(rows32[j].data());
          }
          const int64_t ldp = nk + 3, ldo = width + 2;
          std::vector<float> p(size_t(n_rows * ldp));
          for (float& x : p) x = (rng() % 5 == 0) ? 0.0f : std::fabs(normal(rng));
          std::vector<float> want(size_t(n_rows * ldo), 9.0f), got = want, as_f32 = want;
          weighted_value_sum_reference(p.data(), ldp, n_rows, GgmlType::Q8_0, v.data(), v_col, nk, width,
                                       want.data(), ldo);
          weighted_value_sum_reference(p.data(), ldp, n_rows, GgmlType::F32, v32.data(), v_col, nk, width,
                                       as_f32.data(), ldo);
          ASSERT_EQ(0, std::memcmp(want.data(), as_f32.data(), want.size() * sizeof(float)));
          for (Isa isa : kAllIsas) {
            if (!isa_supported(isa)) continue;
            IsaOverride o(isa);
            std::fill(got.begin(), got.end(), 9.0f);
            weighted_value_sum(p.data(), ldp, n_rows, GgmlType::Q8_0, v.data(), v_col, nk, width, got.data(),
                               ldo);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << "q8_0 v_col=" << v_col << " width=" << width << " rows=" << n_rows << " nk=" << nk
                << " isa=" << isa_name(active_isa());
            for (int64_t cut : {int64_t{0}, nk / 3, nk}) {  // split and continued (accumulate)
              std::fill(got.begin(), got.end(), 9.0f);
              weighted_value_sum(p.data(), ldp, n_rows, GgmlType::Q8_0, v.data(), v_col, cut, width,
                                 got.data(), ldo);
              weighted_value_sum(p.data() + cut, ldp, n_rows, GgmlType::Q8_0, v.data() + cut, v_col, nk - cut,
                                 width, got.data(), ldo, true);
              ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                  << "q8_0 v_col=" << v_col << " width=" << width << " rows=" << n_rows << " nk=" << nk
                  << " split at " << cut << " isa=" << isa_name(active_isa());
            }
          }
        }
      }
    }
  }
}

// Q8_0 blocks whose scale is infinite or NaN (what a non-finite K/V row leaves): every set gives the
// reference's results, NaN where it has NaN.
TEST(AttentionOps, WeightedValueSumQ8_0NonFiniteScales) {
  const int width = 64, n_rows = 5;
  const int64_t nk = 7;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<BlockQ8_0>> rows(nk);
  std::vector<const void*> v;
  for (int64_t j = 0; j < nk; ++j) {
    rows[j] = random_q8_0_row(2, rng);
    v.push_back(rows[j].data());
  }
  rows[1][0].d = 0x7C00;  // +inf
  rows[3][1].d = 0xFC00;  // -inf
  rows[5][0].d = 0x7E00;  // NaN
  rows[5][0].qs[4] = 0;   // inf * 0 is NaN too, as in the reference
  std::vector<float> p(size_t(n_rows * nk));
  for (float& x : p) x = std::fabs(normal(rng));
  std::vector<float> want(size_t(n_rows * width)), got(want.size());
  weighted_value_sum_reference(p.data(), nk, n_rows, GgmlType::Q8_0, v.data(), 0, nk, width, want.data(),
                               width);
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    IsaOverride o(isa);
    weighted_value_sum(p.data(), nk, n_rows, GgmlType::Q8_0, v.data(), 0, nk, width, got.data(), width);
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << i << " isa=" << isa_name(isa);
      } else {
        ASSERT_EQ(0, std::memcmp(&want[i], &got[i], sizeof(float))) << i << " isa=" << isa_name(isa);
      }
    }
  }
}

// Attention scores against Q8_0 keys as the cache holds them: rows of n_kv_heads * head_dim values,
// one head's columns read at a block offset (so the rows are 34-byte blocks at odd addresses), row_bytes
// the whole cache row. The product quantizes each query block as llama.cpp does (d = amax / 127 as
// f16, q = round-half-even(x * 127 / amax); quantize_row_q8_0_activation) and sums d_k * d_q * (int8
// dot) per block: checked against that sum in double on every set, the SIMD sets agreeing bit for bit
// with each other, and each query row's scores not depending on how many rows are scored together
// (decode against a prompt) or on the thread count.
TEST(AttentionOps, Q8_0KeyScoresAreTheQ8_0DotProduct) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  for (int hd : {32, 64, 256}) {
    const int n_kv = 3, width = n_kv * hd, nb = hd / kQK;
    for (int nk : {1, 5, 70}) {
      // nk cache rows of K, quantized from random values the way the cache stores them.
      std::vector<float> k32(size_t(nk) * width);
      for (float& x : k32) x = normal(rng) * 2.0f;
      std::vector<BlockQ8_0> cache(size_t(nk) * width / kQK);
      for (int j = 0; j < nk; ++j)
        quantize_row_q8_0_activation(k32.data() + size_t(j) * width, cache.data() + size_t(j) * width / kQK,
                                     width);
      for (int g = 0; g < n_kv; ++g) {
        MatrixView keys;
        keys.type = GgmlType::Q8_0;
        keys.data = cache.data() + g * nb;
        keys.in = hd;
        keys.out = nk;
        keys.row_bytes = size_t(width / kQK) * sizeof(BlockQ8_0);
        for (int rows : {1, 3, 8, 37}) {
          const int64_t ldq = hd + 5;
          std::vector<float> q(size_t(rows) * ldq);
          for (float& x : q) x = normal(rng);
          // The reference in double, from the blocks themselves.
          std::vector<double> want(size_t(rows) * nk), bound(want.size());
          std::vector<BlockQ8_0> qb(nb);
          for (int r = 0; r < rows; ++r) {
            quantize_row_q8_0_activation(q.data() + r * ldq, qb.data(), hd);
            for (int j = 0; j < nk; ++j) {
              const BlockQ8_0* kb = cache.data() + size_t(j) * width / kQK + g * nb;
              double acc = 0, mag = 0;
              for (int b = 0; b < nb; ++b) {
                int64_t isum = 0, iabs = 0;
                for (int i = 0; i < kQK; ++i) {
                  isum += int(kb[b].qs[i]) * int(qb[b].qs[i]);
                  iabs += std::abs(int(kb[b].qs[i]) * int(qb[b].qs[i]));
                }
                const double dd = double(fp16_to_fp32(kb[b].d)) * double(fp16_to_fp32(qb[b].d));
                acc += dd * double(isum), mag += std::fabs(dd) * double(iabs);
              }
              want[size_t(r) * nk + j] = acc, bound[size_t(r) * nk + j] = mag;
            }
          }
          std::vector<float> first;
          for (Isa isa : kAllIsas) {
            if (!isa_supported(isa)) continue;
            IsaOverride o(isa);
            for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::vector<float> got(size_t(rows) * (nk + 1), 7.0f);
              matmul(keys, q.data(), rows, ldq, got.data(), nk + 1, tp);
              for (int r = 0; r < rows; ++r) {
                for (int j = 0; j < nk; ++j) {
                  const size_t i = size_t(r) * nk + j;
                  ASSERT_NEAR(got[size_t(r) * (nk + 1) + j], want[i], 1e-5 * bound[i] + 1e-6)
                      << "hd=" << hd << " nk=" << nk << " head " << g << " rows=" << rows << " r=" << r
                      << " key " << j << " isa=" << isa_name(isa);
                }
                ASSERT_EQ(got[size_t(r) * (nk + 1) + nk], 7.0f) << "wrote past the keys";
                // One query row alone gives the same bits (decode and prompt score alike).
                std::vector<float> one(static_cast<size_t>(nk));
                matmul(keys, q.data() + r * ldq, 1, ldq, one.data(), nk, nullptr);
                ASSERT_EQ(0, std::memcmp(one.data(), got.data() + size_t(r) * (nk + 1), nk * sizeof(float)))
                    << "row " << r << " of " << rows << " isa=" << isa_name(isa);
              }
              if (isa == Isa::Scalar) continue;
              if (first.empty()) {
                first = got;
              } else {
                ASSERT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(float)))
                    << "SIMD sets differ, isa=" << isa_name(isa);
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
