// AVX-512 versions of the vectorised ops (see ops.h; ops.cpp dispatches here when active_isa() is
// Avx512): 16 lanes, the tails masked so that every element takes the same vector code.
// GCC 12's _mm512_max_ps (through _mm512_undefined_ps) trips -Wuninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels/ops_internal.h"
#include "tensor/quant.h"

namespace gem4::ops_avx512 {

namespace {

// The lanes of elements [i, min(i + 16, n)): whole vectors, then the masked tail.
__mmask16 tail_mask(int64_t n, int64_t i) {
  return n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
}

// e^y for -104 <= y <= 88 (and NaN): y = n ln2 + r with |r| <= ln2/2 (ln2 in two parts so n ln2 is
// exact enough), e^r by the degree-6 polynomial of Cephes' expf, then scaled by 2^n exactly
// (vscalefps, which also rounds the subnormal results below e^-87.3 correctly).
__m512 exp_ps(__m512 y) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(y, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), y);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 er = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(er, n);
}

// tanh within ~3 ulp of libm's: below |x| = 0.625 the odd polynomial of Cephes' tanhf (no cancellation
// near 0), above it 1 - 2 / (e^2|x| + 1) with the sign of x (e^2|x| capped at e^88: tanh is 1 in f32
// long before). NaN propagates through the upper branch.
__m512 tanh_ps(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
  // min(88, y) returns y when y is NaN (the second operand wins on unordered inputs).
  const __m512 e = exp_ps(_mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_add_ps(ax, ax)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 large_abs = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u)));
  const __m512 large = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(large_abs), sign));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ), large, small);
}

}  // namespace

void gelu_tanh_f16_mul(const float* table, const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  // 16 at a time: the hardware f32 -> f16 conversion (round to nearest even, as fp32_to_fp16) gives
  // the table indices, a gather the values.
  const __m512 lo = _mm512_set1_ps(-10.0f), hi = _mm512_set1_ps(10.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(gate + i);
    const __m512i idx =
        _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m512 g = _mm512_i32gather_ps(idx, table, 4);
    g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask(x, hi, _CMP_GE_OQ), x);
    g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GT_OQ) | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                            g);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(g, _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float x = gate[i];
    const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[fp32_to_fp16(x)];
    out[i] = g * up[i];
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  // As the reference: max, then e^(x - max) summed in double, then scaled by 1 / sum; 16 lanes at a
  // time (masked tail), the sum in 16 double lanes added in a fixed order at the end. Arguments below
  // -104 (e^-104 is below the smallest subnormal; -inf for masked keys) give 0.
  auto mask = [n](int64_t i) { return tail_mask(n, i); };
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += 16)
    mx = _mm512_mask_max_ps(mx, mask(i), mx, _mm512_maskz_loadu_ps(mask(i), x + i));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512d sum_lo = _mm512_setzero_pd(), sum_hi = _mm512_setzero_pd();
  const __m512 lowest = _mm512_set1_ps(-104.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = mask(i);
    const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m);
    __m512 e =
        _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, lowest, _CMP_GE_OQ) & k, exp_ps(_mm512_max_ps(d, lowest)));
    _mm512_mask_storeu_ps(x + i, k, e);
    sum_lo = _mm512_add_pd(sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    sum_hi = _mm512_add_pd(sum_hi,
                           _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  alignas(64) double part[16];
  _mm512_store_pd(part, sum_lo);
  _mm512_store_pd(part + 8, sum_hi);
  double sum = 0;
  for (double p : part) sum += p;
  const __m512 inv = _mm512_set1_ps(float(1.0 / sum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = mask(i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
  }
}

void softcap(float* x, int64_t n, float cap) {
  // Every element, the tail too (masked), takes the same vector code, so a value's result does not
  // depend on where it sits in the array or how the array is split between threads.
  const __m512 c = _mm512_set1_ps(cap), inv = _mm512_set1_ps(1.0f / cap);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n, i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(c, tanh_ps(_mm512_mul_ps(v, inv))));
  }
}

int64_t argmax_finite(const float* x, int64_t n) {
  // Two passes: the largest finite value per lane (four accumulators), then the first index holding
  // the largest of those. The first pass's comparisons are strict, so ties keep the value, and the
  // second pass finds the first occurrence: the reference's answer.
  const __m512 fmax = _mm512_set1_ps(std::numeric_limits<float>::max());
  auto lane_max = [&](__m512 acc, __m512 v, __mmask16 valid) {
    const __mmask16 take = _mm512_mask_cmp_ps_mask(valid, v, acc, _CMP_GT_OQ) &
                           _mm512_cmp_ps_mask(_mm512_abs_ps(v), fmax, _CMP_LE_OQ);
    return _mm512_mask_mov_ps(acc, take, v);
  };
  __m512 acc[4];
  for (auto& a : acc) a = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) acc[k] = lane_max(acc[k], _mm512_loadu_ps(x + i + 16 * k), 0xFFFF);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n, i);
    acc[0] = lane_max(acc[0], _mm512_maskz_loadu_ps(m, x + i), m);
  }
  const float best =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(acc[0], acc[1]), _mm512_max_ps(acc[2], acc[3])));
  if (best == -std::numeric_limits<float>::infinity()) return -1;  // nothing finite
  const __m512 target = _mm512_set1_ps(best);
  for (i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n, i);
    const __mmask16 hit = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i), target, _CMP_EQ_OQ);
    if (hit) return i + __builtin_ctz(hit);
  }
  return -1;  // not reached: best is one of the values
}

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  // The scalar version's arithmetic exactly: the eight partial sums of the float squares are the
  // eight double lanes, the tail goes to part[0], the parts combine in the same order; then
  // y = (x * scale) * w, masked tail.
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
  }
  alignas(64) double part[8];
  _mm512_store_pd(part, acc);
  for (; i < n; ++i) part[0] += double(x[i] * x[i]);
  const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const float scale = rms_scale(ss, n, eps);
  const __m512 s = _mm512_set1_ps(scale);
  for (i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n, i);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s);
    if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

// Every pair of every head: (a, b) -> (fma(a, cos, -(b sin)), fma(a, sin, b cos)), the reference's
// roundings (the products b sin and b cos rounded, then one fused step each).
void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* lo = x + h * head_dim;
    float* hi = lo + half;
    for (int64_t i = 0; i < half; i += 16) {
      const __mmask16 m = tail_mask(half, i);
      const __m512 c = _mm512_maskz_loadu_ps(m, cos + i), s = _mm512_maskz_loadu_ps(m, sin + i);
      const __m512 a = _mm512_maskz_loadu_ps(m, lo + i), b = _mm512_maskz_loadu_ps(m, hi + i);
      _mm512_mask_storeu_ps(lo + i, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
      _mm512_mask_storeu_ps(hi + i, m, _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
    }
  }
}

}  // namespace gem4::ops_avx512
