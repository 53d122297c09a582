// F16C/AVX2 bulk conversions (see convert.h; convert.cpp dispatches here on every vector set): eight
// values per step, the tail (< 8) by the scalar functions of tensor/quant.h, which the vector steps
// match bit for bit (round to nearest even, NaN quieted with its payload's top bits kept), except that
// vcvtph2ps quiets a signalling NaN half, which fp16_to_fp32 passes on unchanged.
#include <immintrin.h>

#include "kernels/ops_internal.h"
#include "tensor/quant.h"

namespace gem4::convert_avx2 {

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(dst + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(h, 16));
  }
  for (; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  // fp32_to_bf16's integer arithmetic on 8 lanes: (u + 0x7FFF + odd) >> 16, a NaN quieted (| 0x40).
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i half = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(hi, one)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
    // Every lane is below 0x10000, so the unsigned-saturating pack is exact; it packs within 128-bit
    // halves, so the permute brings the two groups of four together.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

}  // namespace gem4::convert_avx2
