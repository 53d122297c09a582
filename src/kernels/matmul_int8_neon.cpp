// The integer sums of the AArch64 Neon set (ARMv8.0, no dotprod): byte products widened to int16 by
// smull/smlal2 (two products per int16 lane: at most 2 * 128 * 127 = 32,512, no overflow), pairs
// accumulated into int32 by sadalp. Layout and contract: Int8TileFn in matmul_internal.h.
#include <arm_neon.h>

#include "kernels/matmul_internal.h"

namespace gem4::matmul_detail {

namespace {

// Sum over 32 bytes of w[i] * a[i], as 4 int32 partial sums.
int32x4_t dot32(int8x16_t w0, int8x16_t w1, int8x16_t a0, int8x16_t a1) {
  const int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(a0)), w0, a0);
  const int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(a1)), w1, a1);
  return vpadalq_s16(vpaddlq_s16(p0), p1);
}

void tile(const int8_t* panel, const int8_t* act, int64_t nb, int nrows, int32_t* isum) {
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* pw = panel + b * 128;
    int8x16_t w[4][2];
    for (int j = 0; j < 4; ++j) {
      w[j][0] = vld1q_s8(pw + 32 * j);
      w[j][1] = vld1q_s8(pw + 32 * j + 16);
    }
    for (int r = 0; r < nrows; ++r) {
      const int8_t* pa = act + (r * nb + b) * 32;
      const int8x16_t a0 = vld1q_s8(pa), a1 = vld1q_s8(pa + 16);
      const int32x4_t s0 = dot32(w[0][0], w[0][1], a0, a1), s1 = dot32(w[1][0], w[1][1], a0, a1);
      const int32x4_t s2 = dot32(w[2][0], w[2][1], a0, a1), s3 = dot32(w[3][0], w[3][1], a0, a1);
      vst1q_s32(isum + (r * nb + b) * 4, vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3)));
    }
  }
}

}  // namespace

Int8Tile int8_tile_neon() { return {tile, false}; }

}  // namespace gem4::matmul_detail
