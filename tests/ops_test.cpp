// Element-wise ops on every kernel set this CPU runs (Scalar, Avx2, AvxVnni, Avx512): RoPE against its
// pair-at-a-time reference (bit for bit), the f16-table GELU against its one-at-a-time reference (bit for
// bit), softcap and softmax against std::tanh and std::exp (within a few ulp; the two vector sets give the
// same bits), argmax against its plain loop, RMSNorm against a long-double computation (and the same bits
// on every set), and the f16/bf16 bulk conversions against the scalar functions of tensor/quant.h (bit for
// bit). Lengths cover empty, the 8- and 16-lane bodies and every kind of tail.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/convert.h"
#include "kernels/cpu_features.h"
#include "tensor/quant.h"

namespace gem4 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const int64_t kLengths[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099};

// Runs fn(isa) with each set this CPU supports forced, restoring the default afterwards.
template <class F>
void for_each_isa(F fn) {
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    set_isa_override(isa);
    SCOPED_TRACE(isa_name(isa));
    fn(isa);
    clear_isa_override();
    if (::testing::Test::HasFatalFailure()) return;
  }
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

float ulp(float x) { return std::nextafter(std::fabs(x), kInf) - std::fabs(x); }

TEST(Ops, GeluF16VectorisedMatchesReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> gate, up;
  // Special and boundary values, then random values over many magnitudes.
  for (float x : {0.0f,
                  -0.0f,
                  1e-8f,
                  -1e-8f,
                  6e-5f,
                  -10.0f,
                  -9.999f,
                  -10.001f,
                  10.0f,
                  9.999f,
                  10.001f,
                  65504.0f,
                  -65504.0f,
                  65520.0f,
                  1e30f,
                  -1e30f,
                  kInf,
                  -kInf,
                  std::nextafter(-10.0f, 0.0f),
                  std::nextafter(10.0f, 0.0f),
                  std::numeric_limits<float>::denorm_min(),
                  3e-8f,
                  -3e-8f}) {
    gate.push_back(x);
  }
  for (int i = 0; i < 20000; ++i) gate.push_back(normal(rng) * std::pow(10.0f, float(int(rng() % 9)) - 4.0f));
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(normal(rng));
  for_each_isa([&](Isa) {
    std::vector<int64_t> lengths(std::begin(kLengths), std::end(kLengths));
    lengths.push_back(int64_t(gate.size()));
    for (int64_t n : lengths) {
      std::vector<float> want(size_t(n) + 1, 7.0f), got = want;
      gelu_tanh_f16_mul_reference(gate.data(), up.data(), want.data(), n);
      gelu_tanh_f16_mul(gate.data(), up.data(), got.data(), n);
      for (int64_t i = 0; i <= n; ++i) {  // and nothing written past n
        ASSERT_TRUE(same_bits(want[i], got[i]))
            << "n " << n << " gate " << gate[i] << " up " << up[i] << ": " << want[i] << " vs " << got[i];
      }
      // In place, over gate (the MLP's form) and over up: the same bits.
      for (int over = 0; over < 2; ++over) {
        std::vector<float> g(gate.begin(), gate.begin() + n), u(up.begin(), up.begin() + n);
        float* out = over == 0 ? g.data() : u.data();
        gelu_tanh_f16_mul(g.data(), u.data(), out, n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(same_bits(want[i], out[i]))
              << "in place over " << (over == 0 ? "gate" : "up") << ", n " << n << " element " << i;
      }
    }
    // NaN stays NaN (its bit pattern may differ), in a vector body and in a tail.
    std::vector<float> g(17, 1.0f), u(17, 1.0f), out(17);
    g[3] = g[16] = std::nanf("");
    gelu_tanh_f16_mul(g.data(), u.data(), out.data(), 17);
    EXPECT_TRUE(std::isnan(out[3]));
    EXPECT_TRUE(std::isnan(out[16]));
  });
}

// Gemma's final-logit softcap (cap 30): the vectorised tanh within 4 ulp of std::tanh, and exactly the
// same result for an element wherever it sits in the array (whole vectors, masked tails, any split).
TEST(Ops, SoftcapVectorisedMatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float cap = 30.0f;
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1e-30f,
                          -1e-30f,
                          1e-8f,
                          18.75f,
                          -18.75f,
                          std::nextafter(18.75f, 0.0f),
                          std::nextafter(18.75f, 100.0f),
                          270.0f,
                          -270.0f,
                          3000.0f,
                          -1e30f,
                          1e30f,
                          kInf,
                          -kInf,
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max()};
  for (int i = 0; i < 200000; ++i) x.push_back(normal(rng) * std::pow(10.0f, float(int(rng() % 7)) - 3.0f));
  std::vector<float> want = x;
  softcap_reference(want.data(), int64_t(want.size()), cap);
  std::vector<float> vector_result;  // the first vector set's output: the others must give the same bits
  for_each_isa([&](Isa isa) {
    std::vector<float> got = x;
    softcap(got.data(), int64_t(got.size()), cap);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), 4.0f * ulp(want[i]))
          << "x = " << x[i] << ": " << want[i] << " vs " << got[i];
    }
    // Position independence: the same values through splits with odd tails match the whole call bit for bit.
    for (size_t chunk : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{16}, size_t{33}}) {
      std::vector<float> part = x;
      for (size_t b = 0; b < part.size(); b += chunk)
        softcap(part.data() + b, int64_t(std::min(chunk, part.size() - b)), cap);
      ASSERT_EQ(0, std::memcmp(part.data(), got.data(), got.size() * sizeof(float))) << "chunk " << chunk;
    }
    if (isa != Isa::Scalar) {
      if (vector_result.empty()) vector_result = got;
      ASSERT_EQ(0, std::memcmp(vector_result.data(), got.data(), got.size() * sizeof(float)));
    }
    // Nothing written past n; NaN stays NaN.
    std::vector<float> y(18, 5.0f);
    y[4] = std::nanf("");
    softcap(y.data(), 17, cap);
    EXPECT_TRUE(std::isnan(y[4]));
    EXPECT_EQ(y[17], 5.0f);
    softcap(y.data(), 0, cap);
  });
}

// Greedy decoding's argmax: the vectorised version gives the reference's index on every length (vector
// bodies, masked tails), with ties (the first wins, +0 and -0 tie), NaN and infinities (never chosen),
// the maximum in the first, last and tail positions, and nothing finite (-1).
TEST(Ops, ArgmaxVectorisedMatchesReference) {
  for_each_isa([&](Isa) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const float nan = std::nanf("");
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 130, 1000, 262144}) {
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
      x[size_t(n / 2)] = kInf;
      x[size_t(n / 3)] = nan;
      expect_same("inf and nan");
      if (n > 1) {
        ASSERT_NE(argmax_finite(x.data(), n), n / 2);
      }
      for (auto& v : x) v = -0.0f;
      x[size_t(n - 1)] = 0.0f;
      expect_same("signed zeros");
      ASSERT_EQ(argmax_finite(x.data(), n), 0);
      for (auto& v : x) v = (rng() % 2) ? nan : -kInf;
      expect_same("nothing finite");
      ASSERT_EQ(argmax_finite(x.data(), n), -1);
      x[size_t(n - 1)] = -std::numeric_limits<float>::max();
      expect_same("one finite, last");
      ASSERT_EQ(argmax_finite(x.data(), n), n - 1);
      for (auto& v : x) v = (rng() % 3) ? -kInf : kInf;
      x[size_t(n / 2)] = -1e30f;
      expect_same("one finite among infinities");
    }
    EXPECT_EQ(argmax_finite(nullptr, 0), -1);
  });
}

// Softmax (attention scores): the vectorised version within a few ulp of the std::exp reference on
// every element, -inf (masked keys) exactly 0, any length (masked tails).
TEST(Ops, SoftmaxVectorisedMatchesReference) {
  for_each_isa([&](Isa) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<int64_t> lengths(std::begin(kLengths), std::end(kLengths));
    lengths.push_back(100000);
    for (int64_t n : lengths) {
      for (float spread : {0.1f, 3.0f, 30.0f}) {
        std::vector<float> x(size_t(n) + 1, 3.0f);  // one guard element past n
        for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * spread;
        if (n > 3) x[1] = -kInf, x[n - 1] = -kInf;
        if (n > 5) x[2] = x[0] - 120.0f;  // e^-120: below the smallest subnormal
        std::vector<float> want = x, got = x;
        softmax_reference(want.data(), n);
        softmax(got.data(), n);
        double total = 0;
        for (int64_t i = 0; i < n; ++i) {
          const float tol = 8.0f * ulp(want[i]) + 1e-37f;
          ASSERT_LE(std::fabs(got[i] - want[i]), tol) << "n " << n << " i " << i << " x " << x[i];
          if (x[i] == -kInf) {
            ASSERT_TRUE(same_bits(got[i], 0.0f));
          }
          total += got[i];
        }
        ASSERT_EQ(got[n], 3.0f);
        if (n > 0) {
          EXPECT_NEAR(total, 1.0, 1e-5) << "n " << n;
        }
      }
    }
    // Every key masked, or a +inf score: the reference's NaN (inf - inf) everywhere.
    for (int64_t n : {1, 8, 17}) {
      std::vector<float> masked(size_t(n), -kInf), inf_score(size_t(n), 1.0f);
      inf_score[size_t(n - 1)] = kInf;
      std::vector<float> want_m = masked, want_i = inf_score;
      softmax_reference(want_m.data(), n);
      softmax_reference(want_i.data(), n);
      softmax(masked.data(), n);
      softmax(inf_score.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_TRUE(std::isnan(want_m[i]) && std::isnan(masked[i])) << "all masked n " << n << " i " << i;
        EXPECT_TRUE(std::isnan(want_i[i]) && std::isnan(inf_score[i])) << "+inf n " << n << " i " << i;
      }
    }
  });
}

// The exp's subnormal range (e^-87.3 down to e^-103.3): one score of 0 makes the sum exactly 1, so the
// outputs are the exponentials themselves; the vector sets round them as std::exp does (within one
// subnormal unit) and give the same bits as each other.
TEST(Ops, SoftmaxSubnormalExponentials) {
  std::vector<float> x = {0.0f};
  for (float d = -80.0f; d > -106.0f; d -= 0.0137f) x.push_back(d);
  x.push_back(-104.0f);
  x.push_back(std::nextafter(-104.0f, 0.0f));
  x.push_back(-kInf);
  const int64_t n = int64_t(x.size());
  std::vector<float> want = x;
  softmax_reference(want.data(), n);
  std::vector<float> vector_result;
  for_each_isa([&](Isa isa) {
    std::vector<float> got = x;
    softmax(got.data(), n);
    const float unit = std::numeric_limits<float>::denorm_min();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), 2.0f * ulp(want[i]) + unit) << "x " << x[i];
    }
    if (isa != Isa::Scalar) {
      if (vector_result.empty()) vector_result = got;
      ASSERT_EQ(0, std::memcmp(vector_result.data(), got.data(), got.size() * sizeof(float)));
    }
  });
}

TEST(Ops, RmsNormMatchesLongDouble) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 256, 1536, 2561}) {
    std::vector<float> x(n), w(n);
    for (auto& v : x) v = normal(rng);
    for (auto& v : w) v = 1.0f + 0.1f * normal(rng);
    std::vector<float> scalar_y, scalar_unweighted;
    for_each_isa([&](Isa isa) {
      std::vector<float> y(n + 1, 9.0f), u(n + 1, 9.0f);
      rmsnorm(x.data(), w.data(), n, 1e-6f, y.data());
      rmsnorm(x.data(), nullptr, n, 1e-6f, u.data());
      ASSERT_EQ(y[n], 9.0f);
      ASSERT_EQ(u[n], 9.0f);
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
      // Every set gives the scalar code's bits.
      if (isa == Isa::Scalar) {
        scalar_y = y, scalar_unweighted = u;
      } else {
        ASSERT_EQ(0, std::memcmp(scalar_y.data(), y.data(), n * sizeof(float))) << "n=" << n;
        ASSERT_EQ(0, std::memcmp(scalar_unweighted.data(), u.data(), n * sizeof(float))) << "n=" << n;
      }
    });
  }
  // rmsnorm_groups goes through the same function.
  std::vector<float> g(3 * 17);
  for (auto& v : g) v = normal(rng);
  std::vector<float> want = g;
  for (int k = 0; k < 3; ++k) rmsnorm(want.data() + 17 * k, nullptr, 17, 1e-6f, want.data() + 17 * k);
  rmsnorm_groups(g.data(), nullptr, 3, 17, 1e-6f);
  EXPECT_EQ(0, std::memcmp(g.data(), want.data(), g.size() * sizeof(float)));
}

// The KV cache's bulk conversions: the same bits as the scalar functions on every set, over every f16
// and bf16 bit pattern and f32 values around every rounding boundary (a NaN half: a NaN).
TEST(Ops, ConvertMatchesScalarFunctions) {
  std::vector<uint16_t> halves(1 << 16);
  for (uint32_t h = 0; h < (1u << 16); ++h) halves[h] = uint16_t(h);
  std::mt19937 rng(13);
  std::vector<float> floats;
  auto add_bits = [&](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    floats.push_back(f);
  };
  for (uint32_t h = 0; h < (1u << 16); h += 7) {
    // Each half and bf16 value and its neighbours in f32, halfway points between them included.
    const float a = fp16_to_fp32(uint16_t(h));
    uint32_t u;
    std::memcpy(&u, &a, 4);
    for (uint32_t d : {0u, 1u, 0xFFFu, 0x1000u, 0x1001u, 0x2000u}) add_bits(u + d), add_bits(u - d);
    add_bits(h << 16), add_bits((h << 16) + 0x8000u), add_bits((h << 16) + 0x7FFFu),
        add_bits((h << 16) + 0x8001u);
  }
  for (int i = 0; i < 100000; ++i) add_bits(uint32_t(rng()));
  for (float f : {0.0f, -0.0f, kInf, -kInf, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.98e-8f, 2.9802322e-8f,
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()}) {
    floats.push_back(f);
    floats.push_back(-f);
  }
  add_bits(0x7F800001u), add_bits(0xFFC00000u), add_bits(0x7FBFFFFFu), add_bits(0x7FFFFFFFu);
  for_each_isa([&](Isa) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(15), int64_t(16),
                      int64_t(17), int64_t(halves.size())}) {
      std::vector<float> f16(size_t(n) + 1, 9.0f), bf16(size_t(n) + 1, 9.0f);
      convert_f16_to_f32(halves.data(), f16.data(), n);
      convert_bf16_to_f32(halves.data(), bf16.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        // F16C quiets a signalling NaN half (fp16_to_fp32 keeps it signalling): any NaN is a NaN.
        const float want = fp16_to_fp32(halves[i]);
        ASSERT_TRUE(same_bits(f16[i], want) || (std::isnan(want) && std::isnan(f16[i])))
            << "f16 " << std::hex << halves[i];
        ASSERT_TRUE(same_bits(bf16[i], bf16_to_fp32(halves[i]))) << "bf16 " << std::hex << halves[i];
      }
      ASSERT_EQ(f16[n], 9.0f);
      ASSERT_EQ(bf16[n], 9.0f);
    }
    for (int64_t n :
         {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(17), int64_t(floats.size())}) {
      std::vector<uint16_t> h(size_t(n) + 1, 0x1234), b(size_t(n) + 1, 0x1234);
      convert_f32_to_f16(floats.data(), h.data(), n);
      convert_f32_to_bf16(floats.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(h[i], fp32_to_fp16(floats[i])) << "f32 " << floats[i] << " i " << i;
        ASSERT_EQ(b[i], fp32_to_bf16(floats[i])) << "f32 " << floats[i] << " i " << i;
      }
      ASSERT_EQ(h[n], 0x1234);
      ASSERT_EQ(b[n], 0x1234);
    }
  });
}

// RoPE on every set: bit for bit the pair-at-a-time reference, for head widths with and without a
// vector tail, positions from 0 to past a long context, and factors of 1, ordinary and huge (proportional
// RoPE). Two parameter sets at the same position alternate, as sliding and full layers do, so the kept
// angles must be told apart by their factors and scale, not only by the position.
TEST(Ops, RopeVectorisedMatchesReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> uni(0.5f, 4.0f);
  for_each_isa([&](Isa) {
    for (int64_t head_dim : {2, 6, 16, 32, 34, 64, 66, 128, 256, 512}) {
      const int64_t half = head_dim / 2;
      std::vector<float> ones(static_cast<size_t>(half), 1.0f), mixed(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) mixed[size_t(i)] = i % 3 == 0 ? 1e30f : uni(rng);
      for (int64_t pos : {0, 1, 7, 4095, 131071}) {
        for (int rep = 0; rep < 2; ++rep) {
          for (const std::vector<float>* f : {&ones, &mixed}) {
            const float scale = f == &ones ? 0.89f : 0.97f;
            const int64_t heads = 3;
            std::vector<float> x(size_t(heads * head_dim));
            for (float& v : x) v = normal(rng);
            std::vector<float> want = x;
            rope_neox_reference(want.data(), heads, head_dim, pos, scale, f->data());
            rope_neox(x.data(), heads, head_dim, pos, scale, f->data());
            for (size_t i = 0; i < x.size(); ++i) {
              ASSERT_TRUE(same_bits(x[i], want[i])) << "head_dim " << head_dim << " pos " << pos << " i " << i
                                                    << ": " << x[i] << " vs " << want[i];
            }
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace gem4
