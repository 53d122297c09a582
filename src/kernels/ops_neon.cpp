// Advanced SIMD (ARMv8.0) versions of the vectorised ops (see ops.h; ops.cpp dispatches here for every
// AArch64 set): ops_avx2.cpp's algorithms on 4 lanes, the same constants and operation order (so the
// same bits as the x86 vector sets where both round alike). Tails go through a zero- or -inf-padded
// 4-lane buffer, so every element takes the same vector code.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/ops_internal.h"
#include "tensor/quant.h"

namespace gem4::ops_neon {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Elements [i, i + 4) of x, those past n replaced by `pad`.
float32x4_t load_padded(const float* x, int64_t n, int64_t i, float pad) {
  if (i + 4 <= n) return vld1q_f32(x + i);
  float t[4] = {pad, pad, pad, pad};
  std::memcpy(t, x + i, sizeof(float) * size_t(n - i));
  return vld1q_f32(t);
}
void store_part(float* x, int64_t n, int64_t i, float32x4_t v) {
  if (i + 4 <= n) return vst1q_f32(x + i, v);
  float t[4];
  vst1q_f32(t, v);
  std::memcpy(x + i, t, sizeof(float) * size_t(n - i));
}

// 2^k for -126 <= k <= 127, from the exponent bits.
float32x4_t pow2(int32x4_t k) {
  return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k, vdupq_n_s32(127)), 23));
}

// e^y for -104 <= y <= 88 (and NaN): ops_avx2's exp_ps (the reduction, the polynomial, the two-step
// scaling that rounds subnormal results once).
float32x4_t exp_ps(float32x4_t y) {
  const float32x4_t n = vrndnq_f32(vmulq_f32(y, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(y, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
  p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  const float32x4_t er = vaddq_f32(vfmaq_f32(r, vmulq_f32(p, r), r), vdupq_n_f32(1.0f));
  const int32x4_t ni = vcvtnq_s32_f32(n);  // n is integral: exact (a NaN gives 0, the result stays NaN)
  const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
  return vmulq_f32(vmulq_f32(er, pow2(n1)), pow2(n2));
}

// tanh within ~3 ulp of libm's: ops_avx2's tanh_ps.
float32x4_t tanh_ps(float32x4_t x) {
  const float32x4_t ax = vabsq_f32(x);
  const float32x4_t z = vmulq_f32(x, x);
  float32x4_t p = vdupq_n_f32(-5.70498872745e-3f);
  p = vfmaq_f32(vdupq_n_f32(2.06390887954e-2f), p, z);
  p = vfmaq_f32(vdupq_n_f32(-5.37397155531e-2f), p, z);
  p = vfmaq_f32(vdupq_n_f32(1.33314422036e-1f), p, z);
  p = vfmaq_f32(vdupq_n_f32(-3.33332819422e-1f), p, z);
  const float32x4_t small = vfmaq_f32(x, vmulq_f32(p, z), x);
  // min(88, y), NaN kept (fmin would drop it; vminq returns the NaN).
  const float32x4_t e = exp_ps(vminq_f32(vdupq_n_f32(88.0f), vaddq_f32(ax, ax)));
  const float32x4_t one = vdupq_n_f32(1.0f);
  const float32x4_t large_abs = vsubq_f32(one, vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, one)));
  const uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x80000000u));
  const float32x4_t large = vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(large_abs), sign));
  return vbslq_f32(vcltq_f32(ax, vdupq_n_f32(0.625f)), small, large);
}

}  // namespace

void gelu_tanh_f16_mul(const float* table, const float* gate, const float* up, float* out, int64_t n) {
  // The f32 -> f16 conversion (round to nearest even, as fp32_to_fp16) gives the table indices; then
  // identity from 10 on, 0 up to -10 (NaN kept).
  const float32x4_t lo = vdupq_n_f32(-10.0f), hi = vdupq_n_f32(10.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t x = vld1q_f32(gate + i);
    uint16_t idx[4];
    vst1_u16(idx, vreinterpret_u16_f16(vcvt_f16_f32(x)));
    const float g4[4] = {table[idx[0]], table[idx[1]], table[idx[2]], table[idx[3]]};
    float32x4_t g = vbslq_f32(vcgeq_f32(x, hi), x, vld1q_f32(g4));
    const uint32x4_t keep = vorrq_u32(vcgtq_f32(x, lo), vmvnq_u32(vceqq_f32(x, x)));
    g = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(g), keep));
    vst1q_f32(out + i, vmulq_f32(g, vld1q_f32(up + i)));
  }
  for (; i < n; ++i) {
    const float x = gate[i];
    const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[fp32_to_fp16(x)];
    out[i] = g * up[i];
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  // As ops_avx2's softmax: max, e^(x - max) summed in 8 double lanes (element i in lane i % 8) added
  // in a fixed order, then scaled by 1 / sum. Arguments below -104 (-inf for masked keys) give 0.
  float32x4_t mx = vdupq_n_f32(-kInf);
  for (int64_t i = 0; i < n; i += 4) mx = vmaxq_f32(mx, load_padded(x, n, i, -kInf));
  const float32x4_t m = vdupq_n_f32(vmaxvq_f32(mx));
  float64x2_t sum[4] = {vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0)};
  const float32x4_t lowest = vdupq_n_f32(-104.0f);
  for (int64_t i = 0; i < n; i += 4) {
    const float32x4_t d = vsubq_f32(load_padded(x, n, i, -kInf), m);
    const uint32x4_t keep = vcgeq_f32(d, lowest);
    const float32x4_t e =
        vreinterpretq_f32_u32(vandq_u32(keep, vreinterpretq_u32_f32(exp_ps(vmaxq_f32(d, lowest)))));
    store_part(x, n, i, e);
    const int half = int((i / 4) % 2);
    sum[2 * half] = vaddq_f64(sum[2 * half], vcvt_f64_f32(vget_low_f32(e)));
    sum[2 * half + 1] = vaddq_f64(sum[2 * half + 1], vcvt_high_f64_f32(e));
  }
  double part[8];
  for (int k = 0; k < 4; ++k) vst1q_f64(part + 2 * k, sum[k]);
  double total = 0;
  for (double p : part) total += p;
  const float32x4_t inv = vdupq_n_f32(float(1.0 / total));
  for (int64_t i = 0; i < n; i += 4) store_part(x, n, i, vmulq_f32(load_padded(x, n, i, 0.0f), inv));
}

void softcap(float* x, int64_t n, float cap) {
  const float32x4_t c = vdupq_n_f32(cap), inv = vdupq_n_f32(1.0f / cap);
  for (int64_t i = 0; i < n; i += 4)
    store_part(x, n, i, vmulq_f32(c, tanh_ps(vmulq_f32(load_padded(x, n, i, 0.0f), inv))));
}

int64_t argmax_finite(const float* x, int64_t n) {
  // The largest finite value per lane (strict comparisons), then the first index holding the largest
  // of those: the reference's answer. The tail pads with -inf, which never wins.
  const float32x4_t fmax = vdupq_n_f32(std::numeric_limits<float>::max());
  float32x4_t acc[4];
  for (auto& a : acc) a = vdupq_n_f32(-kInf);
  auto lane_max = [&](float32x4_t a, float32x4_t v) {
    const uint32x4_t take = vandq_u32(vcgtq_f32(v, a), vcleq_f32(vabsq_f32(v), fmax));
    return vbslq_f32(take, v, a);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 4; ++k) acc[k] = lane_max(acc[k], vld1q_f32(x + i + 4 * k));
  }
  for (; i < n; i += 4) acc[0] = lane_max(acc[0], load_padded(x, n, i, -kInf));
  const float best = vmaxvq_f32(vmaxq_f32(vmaxq_f32(acc[0], acc[1]), vmaxq_f32(acc[2], acc[3])));
  if (best == -kInf) return -1;  // nothing finite
  for (i = 0; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return -1;  // not reached: best is one of the values
}

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  // The scalar version's arithmetic exactly: eight partial sums of the float squares in double
  // (element i in part i % 8), the tail into part[0], combined in the same order; then
  // y = (x * scale) * w.
  float64x2_t acc[4] = {vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0)};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
    const float32x4_t a2 = vmulq_f32(a, a), b2 = vmulq_f32(b, b);
    const float64x2_t v[4] = {vcvt_f64_f32(vget_low_f32(a2)), vcvt_high_f64_f32(a2),
                              vcvt_f64_f32(vget_low_f32(b2)), vcvt_high_f64_f32(b2)};
    for (int k = 0; k < 4; ++k) acc[k] = vaddq_f64(acc[k], v[k]);
  }
  double part[8];
  for (int k = 0; k < 4; ++k) vst1q_f64(part + 2 * k, acc[k]);
  for (; i < n; ++i) part[0] += double(x[i] * x[i]);
  const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const float scale = rms_scale(ss, n, eps);
  const float32x4_t s = vdupq_n_f32(scale);
  for (i = 0; i < n; i += 4) {
    float32x4_t v = vmulq_f32(load_padded(x, n, i, 0.0f), s);
    if (w) v = vmulq_f32(v, load_padded(w, n, i, 0.0f));
    store_part(y, n, i, v);
  }
}

}  // namespace gem4::ops_neon
