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
  // Sum of squares in double, in eight interleaved partial sums combined in a fixed order: the
  // compiler can keep them in one vector register, and the result does not depend on how it does.
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) part[k] += double(x[i + k]) * double(x[i + k]);
  }
  for (; i < n; ++i) part[0] += double(x[i]) * double(x[i]);
  const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void rmsnorm_groups(float* x, const float* w, int64_t n_groups, int64_t group, float eps) {
  for (int64_t g = 0; g < n_groups; ++g) rmsnorm(x + g * group, w, group, eps, x + g * group);
}

void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const float* inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    if (inv_freq[i] == 0.0f) continue;  // proportional RoPE: this pair does not rotate
    const float theta = float(pos) * inv_freq[i];
    const float c = std::cos(theta), s = std::sin(theta);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = a * s + b * c;
    }
  }
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

namespace {
// gelu(x) rounded to f16 for every f16 bit pattern x (128 KiB of f32 results).
const std::vector<float>& gelu_f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(1 << 16);
    for (uint32_t h = 0; h < (1u << 16); ++h)
      t[h] = fp16_to_fp32(fp32_to_fp16(gelu_tanh(fp16_to_fp32(uint16_t(h)))));
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
