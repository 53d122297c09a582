// The integer sums of the AArch64 NeonDotprod set: sdot (ARMv8.2 dotprod), 16 byte products per
// instruction into four int32 lanes. Compiled with -march=armv8.2-a+dotprod; called only on CPUs that
// have it. Layout and contract: Int8TileFn in matmul_internal.h.
#include <arm_neon.h>

#include "kernels/matmul_internal.h"

namespace gem4::matmul_detail {

namespace {

void tile(const int8_t* panel, const int8_t* act, int64_t nb, int nrows, int32_t* isum) {
  const int32x4_t zero = vdupq_n_s32(0);
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
      const int32x4_t s0 = vdotq_s32(vdotq_s32(zero, w[0][0], a0), w[0][1], a1);
      const int32x4_t s1 = vdotq_s32(vdotq_s32(zero, w[1][0], a0), w[1][1], a1);
      const int32x4_t s2 = vdotq_s32(vdotq_s32(zero, w[2][0], a0), w[2][1], a1);
      const int32x4_t s3 = vdotq_s32(vdotq_s32(zero, w[3][0], a0), w[3][1], a1);
      vst1q_s32(isum + (r * nb + b) * 4, vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3)));
    }
  }
}

}  // namespace

Int8Tile int8_tile_dotprod() { return {tile, false}; }

}  // namespace gem4::matmul_detail
