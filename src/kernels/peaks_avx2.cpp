// Peak loops of the Avx2 kernel set (AVX2 + FMA, no AVX-512, no AVX-VNNI). Many independent chains so
// that throughput, not latency, bounds each loop; results feed a volatile sink. Timing: peaks.cpp.
#include <immintrin.h>

#include <cstdint>

#include "kernels/page_heads.h"
#include "kernels/peaks_internal.h"

namespace gem4 {

namespace {

volatile int64_t g_sink;

int64_t hsum_i32(__m256i v) {
  alignas(32) int32_t t[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), v);
  int64_t s = 0;
  for (int32_t x : t) s += x;
  return s;
}
// Unsigned: the read loops' sums wrap (only their dependence on every byte matters).
uint64_t hsum_u64(__m256i v) {
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), v);
  return t[0] + t[1] + t[2] + t[3];
}
float hsum(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}

}  // namespace

// The int8 dot sequence of the AVX2 kernels, without loads or the vpsignb of the sign trick: per group,
// four vpmaddubsw ymm (u8 x s8 -> pairs summed to int16), their int16 results summed by three vpaddw,
// widened to int32 by one vpmaddwd (times ones) and accumulated by one vpaddd. Counted: 32 MACs per
// vpmaddubsw ymm (32 byte products), so 128 per group; the vpaddw/vpmaddwd/vpaddd that reduce them
// are the sequence's overhead and count nothing. Two groups per iteration (more would spill registers), each
// with its own accumulator, 2 * iters iterations (about as long as the other loops' iters); the empty asm
// makes the operands look new to the compiler at every group, so it cannot hoist or merge the (otherwise
// loop-invariant) products.
double int8_loop_avx2(int64_t iters) {
  constexpr int kGroups = 2;
  __m256i acc[kGroups];
  for (auto& a : acc) a = _mm256_setzero_si256();
  __m256i a = _mm256_set1_epi8(3), b0 = _mm256_set1_epi8(5), b1 = _mm256_set1_epi8(-2),
          b2 = _mm256_set1_epi8(7), b3 = _mm256_set1_epi8(1);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < 2 * iters; ++i) {
    for (auto& x : acc) {
      asm("" : "+x"(a), "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3));
      const __m256i p0 = _mm256_maddubs_epi16(a, b0), p1 = _mm256_maddubs_epi16(a, b1);
      const __m256i p2 = _mm256_maddubs_epi16(a, b2), p3 = _mm256_maddubs_epi16(a, b3);
      const __m256i s16 = _mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3));
      x = _mm256_add_epi32(x, _mm256_madd_epi16(s16, ones));
    }
  }
  __m256i s = acc[0];
  for (int k = 1; k < kGroups; ++k) s = _mm256_add_epi32(s, acc[k]);
  g_sink = hsum_i32(s);
  return double(2 * iters) * kGroups * 4 * 32;  // 4 vpmaddubsw ymm per group, 32 MACs each
}

double fp32_loop_avx2(int64_t iters) {
  GEM4_PEAK_DECLARE_12(__m256, _mm256_setzero_ps());
  const __m256 a = _mm256_set1_ps(1.0001f), b = _mm256_set1_ps(0.9999f);
#define STEP(x) x = _mm256_fmadd_ps(x, a, b)
  for (int64_t i = 0; i < iters; ++i) {
    GEM4_PEAK_STEP_12(STEP);
  }
#undef STEP
  g_sink = int64_t(hsum(GEM4_PEAK_SUM_12(_mm256_add_ps)));
  return double(iters) * 12 * 8;  // 8 MACs per vfmadd ymm
}

// kHeads: with page-head prefetches (kernels/page_heads.h).
template <bool kHeads>
uint64_t read_loop_avx2_with(const uint8_t* p8, size_t bytes) {
  const __m256i* p = reinterpret_cast<const __m256i*>(p8);
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 4 <= bytes / 32; i += 4) {
    if constexpr (kHeads) prefetch_page_head(reinterpret_cast<const uint8_t*>(p + i), sizeof(p[0]) * 4);
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(p + i));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(p + i + 1));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(p + i + 2));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(p + i + 3));
  }
  return uint64_t(hsum_u64(_mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3))));
}

template <int S>
uint64_t read_loop_avx2_streams(const uint8_t* p8, size_t bytes) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0;
  uint64_t rest = 0;
  read_in_streams<S>(
      p8, bytes,
      [&](const uint8_t* at) {
        const __m256i* v = reinterpret_cast<const __m256i*>(at);
        s0 = _mm256_add_epi64(s0, _mm256_add_epi64(_mm256_loadu_si256(v), _mm256_loadu_si256(v + 1)));
        s1 = _mm256_add_epi64(s1, _mm256_add_epi64(_mm256_loadu_si256(v + 2), _mm256_loadu_si256(v + 3)));
      },
      [&](const uint8_t* at, size_t n) { rest = read_loop_avx2_with<false>(at, n); });
  return hsum_u64(_mm256_add_epi64(s0, s1)) + rest;
}

uint64_t read_loop_avx2(const uint8_t* p8, size_t bytes) { return read_loop_avx2_with<false>(p8, bytes); }
uint64_t read_loop_avx2_4_streams(const uint8_t* p8, size_t bytes) {
  return read_loop_avx2_streams<4>(p8, bytes);
}
uint64_t read_loop_avx2_8_streams(const uint8_t* p8, size_t bytes) {
  return read_loop_avx2_streams<8>(p8, bytes);
}
uint64_t read_loop_avx2_page_heads(const uint8_t* p8, size_t bytes) {
  return read_loop_avx2_with<true>(p8, bytes);
}

}  // namespace gem4
