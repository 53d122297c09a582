// Internal to the AVX-512 kernel files: 16 elements of an F32, F16 or BF16 row as f32 (the conversions
// are exact; masked-off lanes read as zero and touch no memory). Include only from files compiled with
// the AVX-512 flags.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace gem4::avx512_rows {

struct LoadF32 {
  using T = float;
  static __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct LoadF16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct LoadBF16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
};

}  // namespace gem4::avx512_rows
