// Advanced SIMD (ARMv8.0) bulk conversions (see convert.h; convert.cpp dispatches here for every AArch64
// set): four values per step, the tail by the scalar functions of tensor/quant.h, which the vector steps
// match (round to nearest even; bf16: fp32_to_bf16's integer arithmetic, a NaN quieted).
#include <arm_neon.h>

#include "kernels/ops_internal.h"
#include "tensor/quant.h"

namespace gem4::convert_neon {

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_u32(reinterpret_cast<uint32_t*>(dst + i), vshll_n_u16(vld1_u16(src + i), 16));
  for (; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  // (u + 0x7FFF + odd) >> 16, a NaN quieted (| 0x40).
  const uint32x4_t abs_mask = vdupq_n_u32(0x7FFFFFFF), inf = vdupq_n_u32(0x7F800000);
  const uint32x4_t half = vdupq_n_u32(0x7FFF), one = vdupq_n_u32(1), quiet = vdupq_n_u32(0x40);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32x4_t u = vld1q_u32(reinterpret_cast<const uint32_t*>(src + i));
    const uint32x4_t hi = vshrq_n_u32(u, 16);
    const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(vaddq_u32(u, half), vandq_u32(hi, one)), 16);
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, abs_mask), inf);
    vst1_u16(dst + i, vmovn_u32(vbslq_u32(nan, vorrq_u32(hi, quiet), rounded)));
  }
  for (; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

}  // namespace gem4::convert_neon
