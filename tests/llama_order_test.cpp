// kernels/llama_order.h: ggml's summation orders, checked against a plain double-precision dot product
// (close) and against the order each one claims (exact, from the lanes summed by hand); ggml_v_expf's
// polynomial against std::exp; the products on every kernel set (one portable implementation: the same
// bits whichever set is active).
#include "kernels/llama_order.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "isa_override.h"
#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"

namespace gem4 {
namespace {

std::vector<float> normal_vector(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(LlamaOrder, Reduce16IsHalvesThenQuartersThenPairs) {
  float v[16];
  for (int i = 0; i < 16; ++i) v[i] = float(i + 1);
  v[0] = 1e8f, v[8] = -1e8f;  // lane 0 + lane 8 first: they cancel before anything small is added
  float h[8], q[4];
  for (int i = 0; i < 8; ++i) h[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) q[i] = h[i + 4] + h[i];
  EXPECT_EQ(llama_reduce16(v), (q[0] + q[2]) + (q[1] + q[3]));
  EXPECT_EQ(llama_reduce16(v), 126.0f);  // 2 + ... + 16 except 9, exactly (a running sum loses them)
}

TEST(LlamaOrder, DotProductsAreCloseToExactAndFollowTheirOrder) {
  std::mt19937 rng(7);
  for (int64_t n : {1, 15, 16, 32, 48, 63, 64, 65, 128, 200, 256, 1000}) {
    SCOPED_TRACE(n);
    const auto a = normal_vector(rng, size_t(n)), b = normal_vector(rng, size_t(n));
    double exact = 0, mag = 0;
    for (int64_t k = 0; k < n; ++k)
      exact += double(a[k]) * double(b[k]), mag += std::fabs(double(a[k]) * b[k]);
    for (bool batch : {false, true}) {
      const float got = llama_dot_f32(a.data(), b.data(), n, batch);
      EXPECT_NEAR(got, exact, 4e-7 * mag + 1e-30) << "batch " << batch;
    }
    // tinyBLAS (n % 16 == 0): lane l sums k = l, l + 16, ... by FMA.
    if (n % 16 == 0) {
      float lanes[16] = {};
      for (int64_t k = 0; k < n; ++k) lanes[k % 16] = std::fma(a[k], b[k], lanes[k % 16]);
      EXPECT_EQ(llama_dot_f32(a.data(), b.data(), n, true), llama_reduce16(lanes));
    }
    // Below 64 elements ggml_vec_dot_f32 is one rounded product at a time.
    if (n < 64) {
      float s = 0;
      for (int64_t k = 0; k < n; ++k) {
        const volatile float p = a[k] * b[k];
        s = s + p;
      }
      EXPECT_EQ(llama_dot_f32(a.data(), b.data(), n, false), s);
    }
  }
}

TEST(LlamaOrder, MatmulIsTheDotProductOnEveryKernelSetAndThreadCount) {
  std::mt19937 rng(11);
  const int64_t in = 96, out = 37, rows = 5;
  const auto w = normal_vector(rng, size_t(in * out)), x = normal_vector(rng, size_t(in * rows));
  MatrixView m;
  m.type = GgmlType::F32, m.data = w.data(), m.in = in, m.out = out, m.row_bytes = size_t(in) * sizeof(float);
  ThreadPool pool(2);
  for (bool batch : {false, true}) {
    std::vector<float> want(size_t(rows * out));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o)
        want[size_t(r * out + o)] = llama_dot_f32(w.data() + o * in, x.data() + r * in, in, batch);
    for (Isa isa : kAllIsas) {
      if (!isa_supported(isa)) continue;
      test::IsaOverride ov(isa);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> got(want.size(), 9.0f);
        llama_matmul_f32(m, x.data(), rows, in, got.data(), out, batch, p);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << isa_name(isa);
      }
    }
  }
  m.type = GgmlType::F16;
  std::vector<float> y(size_t(rows * out));
  EXPECT_THROW(llama_matmul_f32(m, x.data(), rows, in, y.data(), out, true, nullptr), std::invalid_argument);
}

TEST(LlamaOrder, ExpIsCloseToStdExpAndSaturates) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(llama_expf(x)) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(llama_expf(0.0f), 1.0f);
  EXPECT_EQ(llama_expf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(llama_expf(-200.0f), 0.0f);
  EXPECT_EQ(llama_expf(200.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(llama_expf(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace gem4
