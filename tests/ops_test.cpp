// Element-wise ops: the vectorised f16-table GELU against its one-at-a-time reference (bit for bit),
// the vectorised softcap against std::tanh (within a few ulp), and RMSNorm against a long-double
// computation.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gem4 {
namespace {

TEST(Ops, GeluF16VectorisedMatchesReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> gate, up;
  // Special and boundary values, then random values over many magnitudes.
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, 1e-8f, -1e-8f, 6e-5f, -10.0f, -9.999f, -10.001f, 10.0f, 9.999f, 10.001f, 65504.0f,
                  -65504.0f, 1e30f, -1e30f, inf, -inf, std::nextafter(-10.0f, 0.0f)}) {
    gate.push_back(x);
  }
  for (int i = 0; i < 20000; ++i) gate.push_back(normal(rng) * std::pow(10.0f, float(int(rng() % 9)) - 4.0f));
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(normal(rng));
  for (size_t n : {gate.size(), size_t{1}, size_t{15}, size_t{17}, size_t{33}}) {
    std::vector<float> want(n), got(n);
    gelu_tanh_f16_mul_reference(gate.data(), up.data(), want.data(), int64_t(n));
    gelu_tanh_f16_mul(gate.data(), up.data(), got.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
          << "gate " << gate[i] << " up " << up[i] << ": " << want[i] << " vs " << got[i];
    }
  }
  // NaN stays NaN (its bit pattern may differ).
  const float nan_gate = std::nanf(""), one = 1.0f;
  float out = 0;
  gelu_tanh_f16_mul(&nan_gate, &one, &out, 1);
  EXPECT_TRUE(std::isnan(out));
}

// Gemma's final-logit softcap (cap 30): the vectorised tanh within 4 ulp of std::tanh, and exactly the
// same result for an element wherever it sits in the array (whole vectors, masked tails, any split).
TEST(Ops, SoftcapVectorisedMatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity(), cap = 30.0f;
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-8f, 18.75f, -18.75f, std::nextafter(18.75f, 0.0f),
                          std::nextafter(18.75f, 100.0f), 270.0f, -270.0f, 3000.0f, -1e30f, 1e30f, inf, -inf,
                          std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()};
  for (int i = 0; i < 200000; ++i) x.push_back(normal(rng) * std::pow(10.0f, float(int(rng() % 7)) - 3.0f));
  std::vector<float> want = x, got = x;
  softcap_reference(want.data(), int64_t(want.size()), cap);
  softcap(got.data(), int64_t(got.size()), cap);
  for (size_t i = 0; i < x.size(); ++i) {
    const float tol = 4.0f * (std::nextafter(std::fabs(want[i]), inf) - std::fabs(want[i]));
    ASSERT_LE(std::fabs(got[i] - want[i]), tol) << "x = " << x[i] << ": " << want[i] << " vs " << got[i];
  }
  // Position independence: the same values through splits with odd tails match the whole call bit for bit.
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{16}, size_t{33}}) {
    std::vector<float> part = x;
    for (size_t b = 0; b < part.size(); b += chunk) softcap(part.data() + b, int64_t(std::min(chunk, part.size() - b)), cap);
    ASSERT_EQ(0, std::memcmp(part.data(), got.data(), got.size() * sizeof(float))) << "chunk " << chunk;
  }
  float nan = std::nanf("");
  softcap(&nan, 1, cap);
  EXPECT_TRUE(std::isnan(nan));
}

// Greedy decoding's argmax: the vectorised version gives the reference's index on every length (vector
// bodies, masked tails), with ties (the first wins, +0 and -0 tie), NaN and infinities (never chosen),
// the maximum in the first, last and tail positions, and nothing finite (-1).
TEST(Ops, ArgmaxVectorisedMatchesReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t n : {1, 2, 15, 16, 17, 63, 64, 65, 130, 1000, 262144}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng);
    auto expect_same = [&](const char* what) {
      ASSERT_EQ(argmax_finite(x.data(), n), argmax_finite_reference(x.data(), n)) << what << " n=" << n;
    };
    expect_same("random");
    x[size_t(n - 1)] = 50.0f;
    expect_same("max last");
    x[0] = 50.0f;
    expect_same("tie first and last");
    ASSERT_EQ(argmax_finite(x.data(), n), 0);
    x[size_t(n / 2)] = inf;
    x[size_t(n / 3)] = nan;
    expect_same("inf and nan");
    if (n > 1) {
      ASSERT_NE(argmax_finite(x.data(), n), n / 2);
    }
    for (auto& v : x) v = -0.0f;
    x[size_t(n - 1)] = 0.0f;
    expect_same("signed zeros");
    ASSERT_EQ(argmax_finite(x.data(), n), 0);
    for (auto& v : x) v = (rng() % 2) ? nan : -inf;
    expect_same("nothing finite");
    ASSERT_EQ(argmax_finite(x.data(), n), -1);
    x[size_t(n - 1)] = -std::numeric_limits<float>::max();
    expect_same("one finite, last");
    ASSERT_EQ(argmax_finite(x.data(), n), n - 1);
  }
  EXPECT_EQ(argmax_finite(nullptr, 0), -1);
}

// Softmax (attention scores): the vectorised version within a few ulp of the std::exp reference on
// every element, -inf (masked keys) exactly 0, any length (masked tails).
TEST(Ops, SoftmaxVectorisedMatchesReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 2, 7, 15, 16, 17, 100, 513, 4096}) {
    for (float spread : {0.1f, 3.0f, 30.0f}) {
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng) * spread;
      if (n > 3) x[1] = -inf, x[n - 1] = -inf;
      if (n > 5) x[2] = x[0] - 120.0f;  // e^-120: below the smallest subnormal
      std::vector<float> want = x, got = x;
      softmax_reference(want.data(), n);
      softmax(got.data(), n);
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float tol = 8.0f * (std::nextafter(want[i], inf) - want[i]) + 1e-37f;
        ASSERT_LE(std::fabs(got[i] - want[i]), tol) << "n " << n << " i " << i << " x " << x[i];
        if (x[i] == -inf) {
          ASSERT_EQ(got[i], 0.0f);
        }
        total += got[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-5) << "n " << n;
    }
  }
}

TEST(Ops, RmsNormMatchesLongDouble) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int n : {1, 7, 8, 9, 256, 1536, 2561}) {
    std::vector<float> x(n), w(n), y(n);
    for (auto& v : x) v = normal(rng);
    for (auto& v : w) v = 1.0f + 0.1f * normal(rng);
    rmsnorm(x.data(), w.data(), n, 1e-6f, y.data());
    long double ss = 0;
    for (float v : x) ss += (long double)v * v;
    const long double scale = 1.0L / std::sqrt(ss / n + 1e-6L);
    for (int i = 0; i < n; ++i) {
      const double want = double(x[i] * scale * w[i]);
      ASSERT_NEAR(y[i], want, 4e-7 * std::fabs(want) + 1e-30) << "n=" << n << " i=" << i;
    }
    // In place gives the same bits.
    std::vector<float> z = x;
    rmsnorm(z.data(), w.data(), n, 1e-6f, z.data());
    ASSERT_EQ(0, std::memcmp(z.data(), y.data(), n * sizeof(float)));
  }
}

}  // namespace
}  // namespace gem4
