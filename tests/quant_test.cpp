// Tests of the scalar element-type references (tensor/quant.h): block layouts checked against blocks
// built by hand from the format definitions, half/bfloat16 conversions against IEEE rules (and the CPU's
// F16C instructions where present), and round-trip error bounds of the quantizers.
#include "tensor/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/cpu_features.h"
#endif

namespace gem4 {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// ---------------------------------------------------------------------------------- fp16

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);  // largest half
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // midpoint, ties to even = infinity
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(fp32_to_fp16(float_of(0x7F800001u)) & 0x03FF, 0);  // signalling nan stays a nan

  // Ties to even in the normal range: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  // Rounding up carries into the exponent: 2 - 2^-12 -> 2.
  EXPECT_EQ(fp32_to_fp16(2.0f - std::ldexp(1.0f, -12)), 0x4000);

  // Subnormals: 2^-24 is the smallest half; 2^-25 is a tie between 0 and it (even: 0).
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(3 * std::ldexp(1.0f, -25)), 0x0002);                      // 1.5 units: to even 2
  EXPECT_EQ(fp32_to_fp16(5 * std::ldexp(1.0f, -25)), 0x0002);                      // 2.5 units: to even 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);                          // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);  // rounds up to normal
  EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -30)), 0x0000);

  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03FF), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0xC000), -2.0f);
  EXPECT_TRUE(std::signbit(fp16_to_fp32(0x8000)));
  EXPECT_EQ(fp16_to_fp32(0x8000), 0.0f);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7C00)));
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xFC00)) && fp16_to_fp32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7C01)));
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
  }
}

#if defined(__x86_64__)
// The CPU's F16C instructions (compiled for them here whatever the build's flags; run where present).
__attribute__((target("f16c"))) float f16c_to_fp32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t f16c_from_fp32(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

// The CPU's conversion instructions are an independent IEEE implementation.
TEST(Fp16, MatchesF16cInstructions) {
  if (!cpu_features().f16c) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float mine = fp16_to_fp32(static_cast<uint16_t>(h));
    const float cpu = f16c_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(cpu)) {
      EXPECT_TRUE(std::isnan(mine));
    } else {
      ASSERT_EQ(bits_of(mine), bits_of(cpu)) << h;
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    // Exponents around the half range, so rounding, subnormal and overflow paths are all hit.
    uint32_t u = any_bits(rng);
    const uint32_t exp = 96 + (u >> 24) % 48;  // 2^-31 .. 2^16
    u = (u & 0x807FFFFFu) | (exp << 23);
    const float f = float_of(u);
    ASSERT_EQ(fp32_to_fp16(f), f16c_from_fp32(f)) << std::hex << u;
  }
}
#endif

// ---------------------------------------------------------------------------------- bf16

TEST(Bf16, KnownValues) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_bf16(float_of(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(float_of(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(float_of(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(fp32_to_bf16(float_of(0x3F807FFFu)), 0x3F80);  // below the tie
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to infinity
  EXPECT_EQ(fp32_to_bf16(float_of(0x00010000u)), 0x0001);              // subnormal, exact
  EXPECT_EQ(fp32_to_bf16(float_of(0x00018000u)), 0x0002);              // subnormal tie to even
  const uint16_t nan = fp32_to_bf16(float_of(0x7F800001u));            // nan with low payload only
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bits_of(bf16_to_fp32(0x8001)), 0x80010000u);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
}

// ---------------------------------------------------------------------------------- layouts

template <class Block>
std::vector<float> dequant_one(GgmlType t, const Block& b, int n) {
  std::vector<float> out(n);
  dequantize_row(t, &b, out.data(), n);
  return out;
}

TEST(Layout, Q4_0) {
  BlockQ4_0 b;
  b.d = 0x3C00;  // 1.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequant_one(GgmlType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j - 8) << j;       // low nibbles: elements 0..15
    EXPECT_EQ(y[j + 16], 7 - j) << j;  // high nibbles: elements 16..31
  }
}

TEST(Layout, Q4_1) {
  BlockQ4_1 b;
  b.d = 0x3800;  // 0.5
  b.m = 0xBC00;  // -1.0
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(((j * 7) % 16) | (j << 4));
  const auto y = dequant_one(GgmlType::Q4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], ((j * 7) % 16) * 0.5f - 1.0f);
    EXPECT_EQ(y[j + 16], j * 0.5f - 1.0f);
  }
}

TEST(Layout, Q5_0AndQ5_1) {
  const uint32_t qh = 0xA5C3F00Fu;
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((j + 3) % 16 | (((j * 5) % 16) << 4));
  auto level = [&](int i) {  // element i: 4 low bits from the nibble, bit 4 from bit i of qh
    const int nib = i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4);
    return nib | static_cast<int>(((qh >> i) & 1) << 4);
  };
  BlockQ5_0 b0;
  b0.d = 0x4000;  // 2.0
  std::memcpy(b0.qh, &qh, 4);
  std::memcpy(b0.qs, qs, 16);
  const auto y0 = dequant_one(GgmlType::Q5_0, b0, 32);
  BlockQ5_1 b1;
  b1.d = 0x3400;  // 0.25
  b1.m = 0x4200;  // 3.0
  std::memcpy(b1.qh, &qh, 4);
  std::memcpy(b1.qs, qs, 16);
  const auto y1 = dequant_one(GgmlType::Q5_1, b1, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(y0[i], (level(i) - 16) * 2.0f) << i;
    EXPECT_EQ(y1[i], level(i) * 0.25f + 3.0f) << i;
  }
}

TEST(Layout, Q8_0) {
  BlockQ8_0 b;
  b.d = 0x3400;  // 0.25
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const auto y = dequant_one(GgmlType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.25f);
}

// Q4_K / Q5_K scales from the format definition: sub-blocks 0-3 in the low 6 bits of bytes 0-3
// (scale) and 4-7 (min); sub-blocks 4-7 with low 4 bits in bytes 8-11 (scale low nibble, min high
// nibble) and high 2 bits in the top bits of bytes 0-3 (scale) and 4-7 (min).
void pack_k_scales(const int sc[8], const int mn[8], uint8_t scales[12]) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

TEST(Layout, Q4_K) {
  const int sc[8] = {1, 2, 17, 63, 33, 47, 60, 5};
  const int mn[8] = {0, 63, 10, 15, 20, 40, 50, 31};
  BlockQ4_K b;
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  pack_k_scales(sc, mn, b.scales);
  auto level = [](int e) { return (e * 7 + 3) % 16; };
  for (int e = 0; e < 256; ++e) {
    // Element e: chunk c = e / 64 uses bytes qs[32c ..]; the first 32 of the chunk in low nibbles.
    const int c = e / 64, within = e % 64;
    uint8_t& byte = b.qs[32 * c + within % 32];
    if (within < 32)
      byte = static_cast<uint8_t>((byte & 0xF0) | level(e));
    else
      byte = static_cast<uint8_t>((byte & 0x0F) | (level(e) << 4));
  }
  const auto y = dequant_one(GgmlType::Q4_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(y[e], 1.0f * sc[s] * level(e) - 0.5f * mn[s]) << e;
  }
}

TEST(Layout, Q5_K) {
  const int sc[8] = {63, 1, 9, 30, 16, 48, 3, 40};
  const int mn[8] = {5, 6, 0, 63, 17, 32, 61, 2};
  BlockQ5_K b;
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  pack_k_scales(sc, mn, b.scales);
  std::memset(b.qh, 0, sizeof b.qh);
  auto level = [](int e) { return (e * 11 + 5) % 32; };
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, within = e % 64, l = within % 32;
    uint8_t& byte = b.qs[32 * c + l];
    if (within < 32)
      byte = static_cast<uint8_t>((byte & 0xF0) | (level(e) & 0xF));
    else
      byte = static_cast<uint8_t>((byte & 0x0F) | ((level(e) & 0xF) << 4));
    // Bit 4: bit 2c of qh[l] for the first 32 of chunk c, bit 2c+1 for the second 32.
    if (level(e) & 16) b.qh[l] |= static_cast<uint8_t>(1 << (2 * c + (within < 32 ? 0 : 1)));
  }
  const auto y = dequant_one(GgmlType::Q5_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(y[e], 0.5f * sc[s] * level(e) - 0.25f * mn[s]) << e;
  }
}

TEST(Layout, Q6_K) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof b);
  b.d = 0x3800;  // 0.5
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s * 9 - 70);
  auto level = [](int e) { return (e * 13 + 1) % 64; };  // stored 6-bit value, weight uses level - 32
  for (int e = 0; e < 256; ++e) {
    // Half h of 128; within it quarter q = pos / 32 and l = pos % 32: quarters 0/1 are low nibbles of
    // ql[l] / ql[l + 32], quarters 2/3 high nibbles of the same; the two high bits are bits 2q, 2q+1 of
    // qh[l].
    const int h = e / 128, pos = e % 128, q = pos / 32, l = pos % 32;
    uint8_t& lo = b.ql[64 * h + l + (q % 2) * 32];
    if (q < 2)
      lo = static_cast<uint8_t>((lo & 0xF0) | (level(e) & 0xF));
    else
      lo = static_cast<uint8_t>((lo & 0x0F) | ((level(e) & 0xF) << 4));
    b.qh[32 * h + l] |= static_cast<uint8_t>((level(e) >> 4) << (2 * q));
  }
  const auto y = dequant_one(GgmlType::Q6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], 0.5f * b.scales[e / 16] * (level(e) - 32)) << e;
  }
}

TEST(Layout, F16AndBf16Rows) {
  const uint16_t h[4] = {0x3C00, 0xC000, 0x0001, 0x7BFF};
  float y[4];
  dequantize_row(GgmlType::F16, h, y, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(y[3], 65504.0f);
  const uint16_t bf[2] = {0x3F80, 0xC040};
  dequantize_row(GgmlType::BF16, bf, y, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
}

// ---------------------------------------------------------------------------------- quantizers

TEST(Quantize, Q8_0RoundsHalfAwayFromZeroLikeGgmlReference) {
  // amax = 127 makes d = 1 exactly, so q = roundf(x).
  float x[32];
  const float vals[] = {127, -127, 63.5f, -63.5f, 0.5f, -0.5f, 2.5f, -2.5f, 1.49f, 0};
  for (int j = 0; j < 32; ++j) x[j] = vals[j % 10];
  BlockQ8_0 b;
  quantize_row(GgmlType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  const int expect[] = {127, -127, 64, -64, 1, -1, 3, -3, 1, 0};
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], expect[j % 10]) << j;
}

TEST(Quantize, Q4_0UsesSignedExtremeAsMinusEight) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 0.25f * (j % 16) - 1.0f;  // in [-1, 2.75]
  x[5] = -4.0f;                                                 // extreme, negative: d = 0.5
  BlockQ4_0 b;
  quantize_row(GgmlType::Q4_0, x, &b, 32);
  EXPECT_EQ(fp16_to_fp32(b.d), 0.5f);
  float y[32];
  dequantize_row(GgmlType::Q4_0, &b, y, 32);
  EXPECT_EQ(y[5], -4.0f);
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(y[j], x[j], 0.25f + 1e-6f) << j;
}

// Q8_K (activations of llama.cpp's K-quant dot products): the first value of largest magnitude maps to
// -127 and d = 1 / iscale carries the sign; rounding is half to even (ggml's nearest_int); bsums are
// per 16; an all-zero super-block is all zero.
TEST(Quantize, Q8_KActivationsFollowLlamaCppReference) {
  std::vector<float> x(512, 0.0f);
  for (int j = 0; j < 256; ++j) x[j] = float(j % 7) - 3.0f;  // in [-3, 3]
  x[10] = 127.0f;    // extreme, positive: iscale = -1 exactly, q = -x
  x[11] = -127.0f;   // same magnitude later: not the one taken
  x[12] = 2.5f;      // halves round to even: -2.5 -> -2
  x[13] = -0.5f;     //                       0.5 -> 0
  x[14] = 3.5f;      //                      -3.5 -> -4
  BlockQ8_K b[2];
  quantize_row_q8_k(x.data(), b, 512);
  EXPECT_EQ(b[0].d, -1.0f);
  EXPECT_EQ(b[0].qs[10], -127);
  EXPECT_EQ(b[0].qs[11], 127);
  EXPECT_EQ(b[0].qs[12], -2);
  EXPECT_EQ(b[0].qs[13], 0);
  EXPECT_EQ(b[0].qs[14], -4);
  for (int j = 15; j < 256; ++j) ASSERT_EQ(b[0].qs[j], -int(x[j])) << j;
  for (int k = 0; k < 16; ++k) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += b[0].qs[16 * k + j];
    EXPECT_EQ(b[0].bsums[k], sum) << k;
  }
  EXPECT_EQ(b[1].d, 0.0f);
  for (int j = 0; j < 256; ++j) ASSERT_EQ(b[1].qs[j], 0) << j;

  // A negative extreme: positive d, and every value within d / 2 of d * q.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int j = 0; j < 256; ++j) x[j] = normal(rng);
  x[100] = -9.0f;
  quantize_row_q8_k(x.data(), b, 256);
  EXPECT_FLOAT_EQ(b[0].d, 9.0f / 127.0f);
  EXPECT_EQ(b[0].qs[100], -127);
  for (int j = 0; j < 256; ++j) EXPECT_LE(std::fabs(b[0].d * b[0].qs[j] - x[j]), b[0].d * 0.5f + 1e-6f) << j;
  EXPECT_THROW(quantize_row_q8_k(x.data(), b, 100), std::invalid_argument);
}

struct ErrorBound {
  GgmlType type;
  double max_rel_rms;
};

class RoundTrip : public ::testing::TestWithParam<ErrorBound> {};

TEST_P(RoundTrip, RelativeRmsErrorIsBounded) {
  const ErrorBound eb = GetParam();
  const int n = 256 * 32;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n), y(n);
  for (float& v : x) v = normal(rng);
  // A few rows with shifted means and outliers, as real weights have.
  for (int i = 0; i < 256; ++i) x[i] += 0.5f;
  x[1000] = 9.0f;
  x[3000] = -7.5f;
  std::vector<uint8_t> q(ggml_row_bytes(eb.type, n));
  quantize_row(eb.type, x.data(), q.data(), n);
  dequantize_row(eb.type, q.data(), y.data(), n);
  double err = 0, ref = 0;
  for (int i = 0; i < n; ++i) {
    err += double(x[i] - y[i]) * (x[i] - y[i]);
    ref += double(x[i]) * x[i];
  }
  const double rel = std::sqrt(err / ref);
  EXPECT_LE(rel, eb.max_rel_rms) << ggml_type_name(eb.type);
  // And the error is not suspiciously small for lossy types (the data really went through the format).
  if (eb.type != GgmlType::F32) {
    EXPECT_GT(rel, eb.max_rel_rms / 20) << ggml_type_name(eb.type);
  }
}

// Bounds: about 1.25x what these quantizers reach on this data (ggml's reach about the same).
INSTANTIATE_TEST_SUITE_P(
    AllTypes, RoundTrip,
    ::testing::Values(ErrorBound{GgmlType::F32, 0.0}, ErrorBound{GgmlType::F16, 3e-4},
                      ErrorBound{GgmlType::BF16, 2.2e-3}, ErrorBound{GgmlType::Q8_0, 0.007},
                      ErrorBound{GgmlType::Q4_0, 0.11}, ErrorBound{GgmlType::Q4_1, 0.097},
                      ErrorBound{GgmlType::Q5_0, 0.055}, ErrorBound{GgmlType::Q5_1, 0.048},
                      ErrorBound{GgmlType::Q4_K, 0.09}, ErrorBound{GgmlType::Q5_K, 0.045},
                      ErrorBound{GgmlType::Q6_K, 0.022}),
    [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

TEST(Quantize, ZeroRowsStayZero) {
  for (GgmlType t : kAllTypes) {
    const int n = 512;
    std::vector<float> x(n, 0.0f), y(n, 1.0f);
    std::vector<uint8_t> q(ggml_row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], 0.0f) << ggml_type_name(t) << " " << i;
  }
}

TEST(Quantize, RoundTripIsStable) {
  // Dequantized values are on the grid: quantizing them again reproduces them.
  const GgmlType types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::F16, GgmlType::BF16};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (GgmlType t : types) {
    const int n = 256;
    std::vector<float> x(n), y(n), z(n);
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> q(ggml_row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    quantize_row(t, y.data(), q.data(), n);
    dequantize_row(t, q.data(), z.data(), n);
    for (int i = 0; i < n; ++i) ASSERT_NEAR(z[i], y[i], 1e-6f * std::fabs(y[i]) + 1e-7f) << ggml_type_name(t);
  }
}

// ---------------------------------------------------------------------------------- llama.cpp golden

// gemma4-tiny-q8_0.gguf is gemma4-tiny-f32.gguf put through `llama-quantize ... Q8_0` (see the manifest),
// i.e. ggml's reference quantizer: ours must reproduce every Q8_0 byte from the f32 weights, and
// dequantizing must give back values within half a step plus the fp16 rounding of the scale
// (|q| <= 127 times up to 2^-11 relative).
TEST(LlamaCppGolden, Q8_0BytesMatchLlamaQuantize) {
  const std::string dir = std::string(GEM4_SOURCE_DIR) + "/../shared/testdata/llamacpp-ref/";
  const auto f32 = gguf::GgufFile::open(dir + "gemma4-tiny-f32.gguf");
  const auto q8 = gguf::GgufFile::open(dir + "gemma4-tiny-q8_0.gguf");
  int checked = 0;
  for (const gguf::TensorInfo& t : q8->tensors()) {
    if (t.type != GgmlType::Q8_0) continue;
    const gguf::TensorInfo* src = f32->find_tensor(t.name);
    ASSERT_NE(src, nullptr) << t.name;
    ASSERT_EQ(src->type, GgmlType::F32) << t.name;
    ASSERT_EQ(src->n_elements(), t.n_elements()) << t.name;
    const int64_t n = t.ne[0], rows = t.n_elements() / n;
    const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, n);
    ASSERT_EQ(t.nbytes, row_bytes * rows) << t.name;
    const auto* x = reinterpret_cast<const float*>(f32->tensor_data(*src));
    const uint8_t* want = q8->tensor_data(t);
    std::vector<uint8_t> mine(row_bytes);
    std::vector<float> back(n);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row(GgmlType::Q8_0, x + r * n, mine.data(), n);
      ASSERT_EQ(0, std::memcmp(mine.data(), want + r * row_bytes, row_bytes)) << t.name << " row " << r;
      dequantize_row(GgmlType::Q8_0, want + r * row_bytes, back.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(want + r * row_bytes) + i / kQK;
        const float d = fp16_to_fp32(blk->d);
        ASSERT_LE(std::fabs(back[i] - x[r * n + i]), (0.5f + 127 * std::ldexp(1.0f, -11)) * d * 1.01f + 1e-7f)
            << t.name << " row " << r << " col " << i;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 20);  // every 2-D weight of the model
}

// ---------------------------------------------------------------------------------- errors

TEST(Errors, SupportedSet) {
  for (GgmlType t : kAllTypes) EXPECT_TRUE(is_supported_weight_type(t)) << ggml_type_name(t);
  EXPECT_FALSE(is_supported_weight_type(GgmlType::Q2_K));
  EXPECT_FALSE(is_supported_weight_type(GgmlType::IQ4_XS));
  EXPECT_FALSE(is_supported_weight_type(GgmlType::Q8_1));
  EXPECT_FALSE(is_supported_weight_type(GgmlType::I32));
}

TEST(Errors, UnsupportedTypesNameTypeAndTensor) {
  try {
    require_supported_weight_type(GgmlType::IQ2_XXS, "blk.3.ffn_up.weight");
    FAIL() << "no exception";
  } catch (const UnsupportedType& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blk.3.ffn_up.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("iq2_xxs"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(require_supported_weight_type(GgmlType::Q6_K, "output.weight"));
  float y[256];
  uint8_t buf[512] = {};
  try {
    dequantize_row(GgmlType::Q3_K, buf, y, 256);
    FAIL() << "no exception";
  } catch (const UnsupportedType& e) {
    EXPECT_NE(std::string(e.what()).find("q3_K"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_row(GgmlType::Q2_K, y, buf, 256), UnsupportedType);
}

TEST(Errors, RowLengthMustBeWholeBlocks) {
  float x[64] = {};
  uint8_t buf[256];
  EXPECT_THROW(quantize_row(GgmlType::Q8_0, x, buf, 40), std::invalid_argument);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_K, buf, x, 64), std::invalid_argument);
}

}  // namespace
}  // namespace gem4
