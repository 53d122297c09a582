// Peak loops of the Avx512 kernel set. Each runs twelve independent accumulator chains (more than the
// instruction latency times the issue width) so the loop is bound by throughput, not latency; results
// feed a volatile sink so the compiler cannot drop the work. Timing and threads: peaks.cpp.
#include <immintrin.h>

#include <cstdint>

#include "kernels/page_heads.h"
#include "kernels/peaks_internal.h"

namespace gem4 {

namespace {

volatile int64_t g_sink;

// Horizontal sums through memory: GCC 12's _mm512_reduce_* trip -Wuninitialized.
// Unsigned: the read loops' sums wrap (only their dependence on every byte matters).
uint64_t hsum_u64(__m512i v) {
  alignas(64) uint64_t t[8];
  _mm512_store_si512(t, v);
  uint64_t s = 0;
  for (uint64_t x : t) s += x;
  return s;
}
int64_t hsum_i32(__m512i v) {
  alignas(64) int32_t t[16];
  _mm512_store_si512(t, v);
  int64_t s = 0;
  for (int32_t x : t) s += x;
  return s;
}
float hsum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}

}  // namespace

double int8_loop_avx512(int64_t iters) {
  GEM4_PEAK_DECLARE_12(__m512i, _mm512_setzero_si512());
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
#define STEP(x) x = _mm512_dpbusd_epi32(x, a, b)
  for (int64_t i = 0; i < iters; ++i) {
    GEM4_PEAK_STEP_12(STEP);
  }
#undef STEP
  g_sink = hsum_i32(GEM4_PEAK_SUM_12(_mm512_add_epi32));
  return double(iters) * 12 * 64;  // 64 int8 MACs per vpdpbusd zmm
}

double bf16_loop_avx512(int64_t iters) {
  GEM4_PEAK_DECLARE_12(__m512, _mm512_setzero_ps());
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f80);
#define STEP(x) x = _mm512_dpbf16_ps(x, a, b)
  for (int64_t i = 0; i < iters; ++i) {
    GEM4_PEAK_STEP_12(STEP);
  }
#undef STEP
  g_sink = int64_t(hsum(GEM4_PEAK_SUM_12(_mm512_add_ps)));
  return double(iters) * 12 * 32;  // 32 bf16 MACs per vdpbf16ps zmm
}

double fp32_loop_avx512(int64_t iters) {
  GEM4_PEAK_DECLARE_12(__m512, _mm512_setzero_ps());
  const __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
#define STEP(x) x = _mm512_fmadd_ps(x, a, b)
  for (int64_t i = 0; i < iters; ++i) {
    GEM4_PEAK_STEP_12(STEP);
  }
#undef STEP
  g_sink = int64_t(hsum(GEM4_PEAK_SUM_12(_mm512_add_ps)));
  return double(iters) * 12 * 16;  // 16 MACs per vfmadd zmm
}

// kHeads: with page-head prefetches (kernels/page_heads.h).
template <bool kHeads>
uint64_t read_loop_avx512_with(const uint8_t* p8, size_t bytes) {
  const __m512i* p = reinterpret_cast<const __m512i*>(p8);
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 4 <= bytes / 64; i += 4) {
    if constexpr (kHeads) prefetch_page_head(reinterpret_cast<const uint8_t*>(p + i), sizeof(p[0]) * 4);
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + i + 1));
    s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + i + 2));
    s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + i + 3));
  }
  return uint64_t(hsum_u64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3))));
}

template <int S>
uint64_t read_loop_avx512_streams(const uint8_t* p8, size_t bytes) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0;
  uint64_t rest = 0;
  read_in_streams<S>(
      p8, bytes,
      [&](const uint8_t* at) {
        s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(at));
        s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(at + 64));
      },
      [&](const uint8_t* at, size_t n) { rest = read_loop_avx512_with<false>(at, n); });
  return hsum_u64(_mm512_add_epi64(s0, s1)) + rest;
}

uint64_t read_loop_avx512(const uint8_t* p8, size_t bytes) { return read_loop_avx512_with<false>(p8, bytes); }
uint64_t read_loop_avx512_4_streams(const uint8_t* p8, size_t bytes) {
  return read_loop_avx512_streams<4>(p8, bytes);
}
uint64_t read_loop_avx512_8_streams(const uint8_t* p8, size_t bytes) {
  return read_loop_avx512_streams<8>(p8, bytes);
}
uint64_t read_loop_avx512_page_heads(const uint8_t* p8, size_t bytes) {
  return read_loop_avx512_with<true>(p8, bytes);
}

}  // namespace gem4
