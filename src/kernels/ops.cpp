// The plain implementations and the references; the vectorised ops dispatch on active_isa() to
// ops_avx2.cpp (Avx2, AvxVnni) or ops_avx512.cpp (Avx512) on x86-64, to ops_neon.cpp (every AArch64
// set) on ARM; Scalar runs the references.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops_internal.h"
#include "tensor/quant.h"

namespace gem4 {

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  // The vector versions do exactly this arithmetic (the same bits).
  switch (active_isa()) {
#if defined(__x86_64__)
    case Isa::Avx512:
      return ops_avx512::rmsnorm(x, w, n, eps, y);
    case Isa::Avx2:
    case Isa::AvxVnni:
      return ops_avx2::rmsnorm(x, w, n, eps, y);
#elif defined(__aarch64__)
    case Isa::Neon:
    case Isa::NeonDotprod:
    case Isa::NeonI8mm:
      return ops_neon::rmsnorm(x, w, n, eps, y);
#endif
    default:
      break;
  }
  // llama.cpp's arithmetic: the squares rounded to float, summed in double, the mean rounded to
  // float and the scale 1 / sqrt(mean + eps) taken in float (a scale one ulp away moves the f16 GELU
  // table's inputs across rounding ties, which the tiny test models amplify to 1e-3 in the logits).
  // The sum runs in eight interleaved double partial sums combined in a fixed order: the compiler can
  // keep them in one vector register, and the result does not depend on how it does.
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) part[k] += double(x[i + k] * x[i + k]);
  }
  for (; i < n; ++i) part[0] += double(x[i] * x[i]);
  const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const float scale = rms_scale(ss, n, eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void rmsnorm_groups(float* x, const float* w, int64_t n_groups, int64_t group, float eps) {
  for (int64_t g = 0; g < n_groups; ++g) rmsnorm(x + g * group, w, group, eps, x + g * group);
}

namespace {

// cos and sin of the pairs' angles for one position, as the reference computes them.
void rope_angles(int64_t half, int64_t pos, float theta_scale, const float* factors, float* cos, float* sin) {
  float theta = float(pos);
  for (int64_t i = 0; i < half; ++i, theta *= theta_scale) {
    const float angle = theta / factors[i];
    cos[i] = std::cos(angle), sin[i] = std::sin(angle);
  }
}

void rope_rotate_reference(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      const float bs = b * sin[i], bc = b * cos[i];  // rounded products: llama.cpp's FMA build fuses only a's
      v[i] = std::fma(a, cos[i], -bs);
      v[i + half] = std::fma(a, sin[i], bc);
    }
  }
}

// The last few positions' angles, per thread: a decode step turns the queries and keys of every layer at
// one position with one or two sets of parameters (sliding and full layers), so the 2 x 128 cos/sin
// calls per layer become one set per parameters. The key compares the factors' values, not their
// address, since each layer has its own copy.
struct RopeAngles {
  int64_t pos = -1, half = 0;
  float theta_scale = 0;
  std::vector<float> factors, cos, sin;
};

const RopeAngles& angles_for(int64_t half, int64_t pos, float theta_scale, const float* factors) {
  constexpr int kEntries = 4;
  thread_local RopeAngles cache[kEntries];
  thread_local int next = 0;
  for (const RopeAngles& e : cache) {
    if (e.pos == pos && e.half == half && e.theta_scale == theta_scale &&
        std::equal(e.factors.begin(), e.factors.end(), factors))
      return e;
  }
  RopeAngles& e = cache[next];
  next = (next + 1) % kEntries;
  e.pos = pos, e.half = half, e.theta_scale = theta_scale;
  e.factors.assign(factors, factors + half), e.cos.resize(size_t(half)), e.sin.resize(size_t(half));
  rope_angles(half, pos, theta_scale, factors, e.cos.data(), e.sin.data());
  return e;
}

}  // namespace

void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, float theta_scale,
               const float* factors) {
  const RopeAngles& a = angles_for(head_dim / 2, pos, theta_scale, factors);
  switch (active_isa()) {
#if defined(__x86_64__)
    case Isa::Avx512:
      return ops_avx512::rope_rotate(x, n_heads, head_dim, a.cos.data(), a.sin.data());
    case Isa::Avx2:
    case Isa::AvxVnni:
      return ops_avx2::rope_rotate(x, n_heads, head_dim, a.cos.data(), a.sin.data());
#endif
    default:
      break;  // Scalar and AArch64 (whose base set has the fused multiply-add): the plain loop
  }
  rope_rotate_reference(x, n_heads, head_dim, a.cos.data(), a.sin.data());
}

void rope_neox_reference(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, float theta_scale,
                         const float* factors) {
  const int64_t half = head_dim / 2;
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  rope_angles(half, pos, theta_scale, factors, c.data(), s.data());
  rope_rotate_reference(x, n_heads, head_dim, c.data(), s.data());
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

namespace {
// gelu(x) as llama.cpp's CPU backend evaluates it when it fills its table (FMA builds fuse the
// 1 + a x^2 term): two of the 65536 entries land on the other side of an f16 rounding tie than
// gelu_tanh(x) does, and one such entry moves the tiny test models' logits by 3e-3.
float gelu_tanh_table_value(float x) {
  const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
  return 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * x * std::fma(0.044715f * x, x, 1.0f)));
}

// gelu(x) rounded to f16 for every f16 bit pattern x (128 KiB of f32 results).
const std::vector<float>& gelu_f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(1 << 16);
    for (uint32_t h = 0; h < (1u << 16); ++h)
      t[h] = fp16_to_fp32(fp32_to_fp16(gelu_tanh_table_value(fp16_to_fp32(uint16_t(h)))));
    return t;
  }();
  return table;
}
}  // namespace

float gelu_tanh_f16(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return gelu_f16_table()[fp32_to_fp16(x)];
}

void gelu_tanh_f16_mul_reference(const float* gate, const float* up, float* out, int64_t n) {
  const float* table = gelu_f16_table().data();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[fp32_to_fp16(x)];
    out[i] = g * up[i];
  }
}

void gelu_tanh_f16_mul(const float* gate, const float* up, float* out, int64_t n) {
  const float* table = gelu_f16_table().data();
  switch (active_isa()) {
#if defined(__x86_64__)
    case Isa::Avx512:
      return ops_avx512::gelu_tanh_f16_mul(table, gate, up, out, n);
    case Isa::Avx2:
    case Isa::AvxVnni:
      return ops_avx2::gelu_tanh_f16_mul(table, gate, up, out, n);
#elif defined(__aarch64__)
    case Isa::Neon:
    case Isa::NeonDotprod:
    case Isa::NeonI8mm:
      return ops_neon::gelu_tanh_f16_mul(table, gate, up, out, n);
#endif
    default:
      break;
  }
  gelu_tanh_f16_mul_reference(gate, up, out, n);
}

void softmax_reference(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void softcap_reference(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void softmax(float* x, int64_t n) {
  switch (active_isa()) {
#if defined(__x86_64__)
    case Isa::Avx512:
      return ops_avx512::softmax(x, n);
    case Isa::Avx2:
    case Isa::AvxVnni:
      return ops_avx2::softmax(x, n);
#elif defined(__aarch64__)
    case Isa::Neon:
    case Isa::NeonDotprod:
    case Isa::NeonI8mm:
      return ops_neon::softmax(x, n);
#endif
    default:
      break;
  }
  softmax_reference(x, n);
}

void softcap(float* x, int64_t n, float cap) {
  switch (active_isa()) {
#if defined(__x86_64__)
    case Isa::Avx512:
      return ops_avx512::softcap(x, n, cap);
    case Isa::Avx2:
    case Isa::AvxVnni:
      return ops_avx2::softcap(x, n, cap);
#elif defined(__aarch64__)
    case Isa::Neon:
    case Isa::NeonDotprod:
    case Isa::NeonI8mm:
      return ops_neon::softcap(x, n, cap);
#endif
    default:
      break;
  }
  softcap_reference(x, n, cap);
}

int64_t argmax_finite_reference(const float* x, int64_t n) {
  int64_t best = -1;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > best_value && x[i] <= std::numeric_limits<float>::max()) {
      best = i;
      best_value = x[i];
    }
  }
  return best;
}

int64_t argmax_finite(const float* x, int64_t n) {
  switch (active_isa()) {
#if defined(__x86_64__)
    case Isa::Avx512:
      return ops_avx512::argmax_finite(x, n);
    case Isa::Avx2:
    case Isa::AvxVnni:
      return ops_avx2::argmax_finite(x, n);
#elif defined(__aarch64__)
    case Isa::Neon:
    case Isa::NeonDotprod:
    case Isa::NeonI8mm:
      return ops_neon::argmax_finite(x, n);
#endif
    default:
      break;
  }
  return argmax_finite_reference(x, n);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace gem4
