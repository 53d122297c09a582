// The integer sums of the AArch64 NeonI8mm set: smmla (ARMv8.6 i8mm) multiplies a 2 x 8 block of
// activations by a 2 x 8 block of weights (32 byte products) into a 2 x 2 int32 tile, so weights and
// activations are stored as interleaved pairs of rows (Int8TileFn in matmul_internal.h); an odd last
// activation row is paired with zeros. Compiled with -march=armv8.2-a+dotprod+i8mm; called only on
// CPUs that have it.
#include <arm_neon.h>

#include "kernels/matmul_internal.h"

namespace gem4::matmul_detail {

namespace {

void tile(const int8_t* panel, const int8_t* act, int64_t nb, int nrows, int32_t* isum) {
  const int pairs = (nrows + 1) / 2;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* pw = panel + b * 128;
    int8x16_t w01[4], w23[4];
    for (int c = 0; c < 4; ++c) {
      w01[c] = vld1q_s8(pw + 16 * c);
      w23[c] = vld1q_s8(pw + 64 + 16 * c);
    }
    for (int p = 0; p < pairs; ++p) {
      const int8_t* pa = act + (p * nb + b) * 64;
      int32x4_t acc01 = vdupq_n_s32(0), acc23 = vdupq_n_s32(0);  // [r0 o0, r0 o1, r1 o0, r1 o1], o2/o3
      for (int c = 0; c < 4; ++c) {
        const int8x16_t a = vld1q_s8(pa + 16 * c);
        acc01 = vmmlaq_s32(acc01, a, w01[c]);
        acc23 = vmmlaq_s32(acc23, a, w23[c]);
      }
      const int64x2_t lo = vreinterpretq_s64_s32(acc01), hi = vreinterpretq_s64_s32(acc23);
      vst1q_s32(isum + ((2 * p) * nb + b) * 4, vreinterpretq_s32_s64(vzip1q_s64(lo, hi)));
      if (2 * p + 1 < nrows)
        vst1q_s32(isum + ((2 * p + 1) * nb + b) * 4, vreinterpretq_s32_s64(vzip2q_s64(lo, hi)));
    }
  }
}

}  // namespace

Int8Tile int8_tile_i8mm() { return {tile, true}; }

}  // namespace gem4::matmul_detail
