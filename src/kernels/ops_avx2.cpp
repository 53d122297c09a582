// AVX2 + FMA + F16C versions of the vectorised ops (see ops.h; ops.cpp dispatches here when
// active_isa() is Avx2 or AvxVnni): the AVX-512 algorithms of ops_avx512.cpp on 8 lanes, with the
// tails under vmaskmov (masked-off lanes read as zero and touch no memory) and blends for the masks.
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels/ops_internal.h"
#include "tensor/quant.h"

namespace gem4::ops_avx2 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// All-ones in the lanes of elements [i, min(i + 8, n)).
__m256i tail_mask(int64_t n, int64_t i) {
  const int left = n - i >= 8 ? 8 : int(n - i);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__m256 abs_ps(__m256 x) { return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }

float reduce_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// 2^k for -126 <= k <= 127, from the exponent bits.
__m256 pow2(__m256i k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

// e^y for -104 <= y <= 88 (and NaN), as ops_avx512's exp_ps: the same reduction and polynomial, bit for
// bit. vscalefps is replaced by two multiplications by 2^(n/2) and 2^(n - n/2) (each between 2^-75
// and 2^64, so normal): the first is exact (e^r is in [0.7, 1.5), the product stays normal), so the
// second rounds once, subnormal results below e^-87.3 included, just as vscalefps does. A NaN y gives
// a NaN e^r, which stays NaN whatever the (meaningless) scale.
__m256 exp_ps(__m256 y) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(y, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), y);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 er = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);  // n is integral: exact
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  return _mm256_mul_ps(_mm256_mul_ps(er, pow2(n1)), pow2(n2));
}

// tanh within ~3 ulp of libm's, as ops_avx512's tanh_ps (the same bits).
__m256 tanh_ps(__m256 x) {
  const __m256 ax = abs_ps(x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  // min(88, y) returns y when y is NaN (the second operand wins on unordered inputs).
  const __m256 e = exp_ps(_mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_add_ps(ax, ax)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 large_abs = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  const __m256 large = _mm256_or_ps(large_abs, _mm256_and_ps(x, _mm256_set1_ps(-0.0f)));
  return _mm256_blendv_ps(large, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

}  // namespace

void gelu_tanh_f16_mul(const float* table, const float* gate, const float* up, float* out, int64_t n) {
  // 8 at a time: the hardware f32 -> f16 conversion (round to nearest even, as fp32_to_fp16) gives
  // the table indices, a gather the values; then identity from 10 on, 0 up to -10 (NaN kept).
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256i idx =
        _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256 g = _mm256_i32gather_ps(table, idx, 4);
    g = _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
    g = _mm256_and_ps(g, _mm256_or_ps(_mm256_cmp_ps(x, lo, _CMP_GT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float x = gate[i];
    const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[fp32_to_fp16(x)];
    out[i] = g * up[i];
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  // As ops_avx512's softmax: max, e^(x - max) summed in 8 double lanes added in a fixed order, then
  // scaled by 1 / sum. Arguments below -104 (-inf for masked keys) give 0.
  __m256 mx = _mm256_set1_ps(-kInf);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i k = tail_mask(n, i);
    mx = _mm256_max_ps(mx, _mm256_blendv_ps(mx, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k)));
  }
  const __m256 m = _mm256_set1_ps(reduce_max(mx));
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  const __m256 lowest = _mm256_set1_ps(-104.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i k = tail_mask(n, i);
    const __m256 d = _mm256_sub_ps(_mm256_maskload_ps(x + i, k), m);
    const __m256 keep = _mm256_and_ps(_mm256_cmp_ps(d, lowest, _CMP_GE_OQ), _mm256_castsi256_ps(k));
    const __m256 e = _mm256_and_ps(keep, exp_ps(_mm256_max_ps(d, lowest)));
    _mm256_maskstore_ps(x + i, k, e);
    sum_lo = _mm256_add_pd(sum_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum_hi = _mm256_add_pd(sum_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double part[8];
  _mm256_store_pd(part, sum_lo);
  _mm256_store_pd(part + 4, sum_hi);
  double sum = 0;
  for (double p : part) sum += p;
  const __m256 inv = _mm256_set1_ps(float(1.0 / sum));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i k = tail_mask(n, i);
    _mm256_maskstore_ps(x + i, k, _mm256_mul_ps(_mm256_maskload_ps(x + i, k), inv));
  }
}

void softcap(float* x, int64_t n, float cap) {
  // Every element, the tail too (masked), takes the same vector code: results do not depend on the
  // position or the split, and equal ops_avx512's bit for bit.
  const __m256 c = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.0f / cap);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i k = tail_mask(n, i);
    const __m256 v = _mm256_maskload_ps(x + i, k);
    _mm256_maskstore_ps(x + i, k, _mm256_mul_ps(c, tanh_ps(_mm256_mul_ps(v, inv))));
  }
}

int64_t argmax_finite(const float* x, int64_t n) {
  // As ops_avx512's: the largest finite value per lane (strict comparisons, four accumulators), then
  // the first index holding the largest of those: the reference's answer.
  const __m256 fmax = _mm256_set1_ps(std::numeric_limits<float>::max());
  auto lane_max = [&](__m256 acc, __m256 v, __m256 valid) {
    const __m256 take = _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(v, acc, _CMP_GT_OQ), valid),
                                      _mm256_cmp_ps(abs_ps(v), fmax, _CMP_LE_OQ));
    return _mm256_blendv_ps(acc, v, take);
  };
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  __m256 acc[4];
  for (auto& a : acc) a = _mm256_set1_ps(-kInf);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) acc[k] = lane_max(acc[k], _mm256_loadu_ps(x + i + 8 * k), all);
  }
  for (; i < n; i += 8) {
    const __m256i k = tail_mask(n, i);
    acc[0] = lane_max(acc[0], _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));
  }
  const float best = reduce_max(_mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3])));
  if (best == -kInf) return -1;  // nothing finite
  const __m256 target = _mm256_set1_ps(best);
  for (i = 0; i < n; i += 8) {
    const __m256i k = tail_mask(n, i);
    const __m256 eq = _mm256_cmp_ps(_mm256_maskload_ps(x + i, k), target, _CMP_EQ_OQ);
    const int hit = _mm256_movemask_ps(_mm256_and_ps(eq, _mm256_castsi256_ps(k)));
    if (hit) return i + __builtin_ctz(unsigned(hit));
  }
  return -1;  // not reached: best is one of the values
}

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  // The scalar version's arithmetic exactly: partial sums 0-3 and 4-7 of the float squares in two
  // double vectors, the tail into part[0], the parts combined in the same order; then
  // y = (x * scale) * w.
  __m256d acc_lo = _mm256_setzero_pd(), acc_hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128 lo = _mm_loadu_ps(x + i), hi = _mm_loadu_ps(x + i + 4);
    acc_lo = _mm256_add_pd(acc_lo, _mm256_cvtps_pd(_mm_mul_ps(lo, lo)));
    acc_hi = _mm256_add_pd(acc_hi, _mm256_cvtps_pd(_mm_mul_ps(hi, hi)));
  }
  alignas(32) double part[8];
  _mm256_store_pd(part, acc_lo);
  _mm256_store_pd(part + 4, acc_hi);
  for (; i < n; ++i) part[0] += double(x[i] * x[i]);
  const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const float scale = rms_scale(ss, n, eps);
  const __m256 s = _mm256_set1_ps(scale);
  for (i = 0; i < n; i += 8) {
    const __m256i k = tail_mask(n, i);
    __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, k), s);
    if (w) v = _mm256_mul_ps(v, _mm256_maskload_ps(w + i, k));
    _mm256_maskstore_ps(y + i, k, v);
  }
}

// As ops_avx512.cpp's, 8 pairs at a time and the last few one by one.
void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* lo = x + h * head_dim;
    float* hi = lo + half;
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
      const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
      const __m256 a = _mm256_loadu_ps(lo + i), b = _mm256_loadu_ps(hi + i);
      _mm256_storeu_ps(lo + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
      _mm256_storeu_ps(hi + i, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
    }
    for (; i < half; ++i) {
      const float a = lo[i], b = hi[i];
      const float bs = b * sin[i], bc = b * cos[i];
      lo[i] = std::fma(a, cos[i], -bs);
      hi[i] = std::fma(a, sin[i], bc);
    }
  }
}

}  // namespace gem4::ops_avx2
