// Internal to the AVX-512 kernel files: lane masks and an in-register transpose shared by the matmul
// kernels. Include only from files compiled with the AVX-512 flags (see load_f32_avx512.h).
#pragma once
#include <immintrin.h>

#include <algorithm>

namespace gem4::avx512_lanes {

// Masks selecting the first `valid` of 32 lanes split over two 16-lane registers.
inline __mmask16 lane_mask_lo(int valid) {
  return valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
}
inline __mmask16 lane_mask_hi(int valid) { return lane_mask_lo(std::max(0, valid - 16)); }

// In-register transpose of a 16x16 block of floats (r[j] = row j): unpacks and in-lane shuffles transpose
// the 4x4 blocks, two rounds of 128-bit lane shuffles move the blocks into place.
inline void transpose_16x16(__m512 r[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    // u[4i + c], 128-bit lane L: element 4L + c of rows 4i..4i+3.
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 p0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88),
                 p1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 q0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 q1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(p0, q0, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(p0, q0, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(p1, q1, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(p1, q1, 0xDD);
  }
}

}  // namespace gem4::avx512_lanes
