#include "kernels/convert.h"

#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "tensor/quant.h"

namespace gem4 {

// With F16C (every x86 CPU with AVX2) eight values convert per instruction; the scalar functions of
// tensor/quant.h are the reference and the fallback. Both round to nearest even.
void convert_f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void convert_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void convert_bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t(src[i]) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

}  // namespace gem4
