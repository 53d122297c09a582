// The AArch64 sets' int8 products (kernels/matmul_neon.cpp): their integer tiles (smull/sadalp, sdot,
// smmla) give exact sums and they share the Scalar set's float steps, so on the 8-bit-activation types
// every AArch64 set reproduces the Scalar set bit for bit, decode (1 row), odd tiles and prefill alike.
// On x86-64 there are no AArch64 sets and the test says so.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "isa_override.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"
#include "tensor/quant.h"

namespace gem4 {
namespace {

TEST(MatmulArm64, EveryAarch64SetGivesTheScalarBitsOnInt8Types) {
  std::vector<Isa> arm;
  for (Isa isa : {Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm})
    if (isa_supported(isa)) arm.push_back(isa);
  if (arm.empty()) GTEST_SKIP() << "not an AArch64 CPU";
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    for (int64_t in : {32, 96, 320}) {
      for (int64_t out : {1, 5, 37}) {
        const size_t row_bytes = ggml_row_bytes(t, in);
        std::vector<uint8_t> data(row_bytes * out);
        std::vector<float> row(in);
        for (int64_t o = 0; o < out; ++o) {
          for (auto& v : row) v = normal(rng) * (0.5f + 0.1f * float(o % 7)) + 0.02f * float(o % 3);
          quantize_row(t, row.data(), data.data() + o * row_bytes, in);
        }
        const MatrixView w{t, data.data(), in, out, row_bytes};
        for (int64_t rows : {1, 2, 3, 5, 9}) {
          std::vector<float> x(rows * in);
          for (auto& v : x) v = normal(rng);
          if (rows > 2) std::fill(x.begin() + in, x.begin() + 2 * in, 0.0f);  // an all-zero row
          std::vector<float> want(rows * out);
          {
            test::IsaOverride o(Isa::Scalar);
            matmul(w, x.data(), rows, in, want.data(), out, nullptr);
          }
          for (Isa isa : arm) {
            test::IsaOverride o(isa);
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::vector<float> got(rows * out, -1.0f);
              matmul(w, x.data(), rows, in, got.data(), out, p);
              ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                  << ggml_type_name(t) << " " << out << " x " << in << " rows=" << rows
                  << " isa=" << isa_name(isa) << (p ? " pool=2" : "");
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gem4
