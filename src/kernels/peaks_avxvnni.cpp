// Peak loop of the AvxVnni kernel set's int8 dot: vpdpbusd ymm (AVX-VNNI, VEX-encoded). Its f32 FMA and
// loads are the Avx2 set's (peaks_avx2.cpp); timing: peaks.cpp.
#include <immintrin.h>

#include <cstdint>

#include "kernels/peaks_internal.h"

namespace gem4 {

namespace {
volatile int64_t g_sink;
}  // namespace

double int8_loop_avxvnni(int64_t iters) {
  GEM4_PEAK_DECLARE_12(__m256i, _mm256_setzero_si256());
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5);
#define STEP(x) x = _mm256_dpbusd_avx_epi32(x, a, b)
  for (int64_t i = 0; i < iters; ++i) {
    GEM4_PEAK_STEP_12(STEP);
  }
#undef STEP
  alignas(32) int32_t t[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), GEM4_PEAK_SUM_12(_mm256_add_epi32));
  int64_t sum = 0;
  for (int32_t v : t) sum += v;
  g_sink = sum;
  return double(iters) * 12 * 32;  // 32 int8 MACs per vpdpbusd ymm
}

}  // namespace gem4
