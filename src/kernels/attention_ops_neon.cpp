// Advanced SIMD (ARMv8.0) weighted sums of value rows (see attention_ops.h), for every AArch64 set: a
// tile of up to 4 output rows (query heads of one KV group share their value rows) x 16 columns in 16
// accumulators while the keys stream by (32 vector registers: 16 accumulators, 4 value vectors, the
// broadcast weights); F32, F16, BF16 and Q8_0 rows. Per output one FMA per key in order of j from +0: the
// reference's bits.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/ggml_types.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4 {

namespace {

// Elements [c, c + 4) of a value row as f32 (exact), and element c alone (for the last columns). Q8_0:
// d * q is exact in f32 (8-bit times 11-bit significands); 4 columns never straddle a block because
// v_col is a multiple of 32 and tiles start at multiples of 4.
struct LoadF32 {
  static float32x4_t load(const void* row, int64_t c) {
    return vld1q_f32(static_cast<const float*>(row) + c);
  }
  static float one(const void* row, int64_t c) { return static_cast<const float*>(row)[c]; }
};
struct LoadF16 {
  static float32x4_t load(const void* row, int64_t c) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(static_cast<const uint16_t*>(row) + c)));
  }
  static float one(const void* row, int64_t c) { return fp16_to_fp32(static_cast<const uint16_t*>(row)[c]); }
};
struct LoadBF16 {
  static float32x4_t load(const void* row, int64_t c) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(static_cast<const uint16_t*>(row) + c), 16));
  }
  static float one(const void* row, int64_t c) { return bf16_to_fp32(static_cast<const uint16_t*>(row)[c]); }
};
struct LoadQ8_0 {
  static float32x4_t load(const void* row, int64_t c) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[c / kQK];
    int32_t q4;  // the 4 quants, copied as one word (no byte array on the stack)
    std::memcpy(&q4, b.qs + c % kQK, 4);
    const int32x4_t qi = vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(q4)))));
    // The scale widened in a register (exact): the out-of-line fp16_to_fp32 call made GCC spill every
    // accumulator of the tile around it, on every key.
    const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(b.d)));
    return vmulq_f32(vcvtq_f32_s32(qi), d);
  }
  static float one(const void* row, int64_t c) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[c / kQK];
    return fp16_to_fp32(b.d) * float(b.qs[c % kQK]);
  }
};

// H rows x 4 * NV columns starting at column d0.
template <class L, int H, int NV>
void value_tile(const float* p, int64_t ldp, const void* const* v, int64_t v_col, int64_t nk, int d0,
                float* out, int64_t ldo, bool accumulate) {
  // Every loop over acc unrolled: rolled, GCC keeps acc in memory and loads and stores it on every key
  // (as it did on x86, see attention_ops_avx512.cpp).
  float32x4_t acc[H][NV];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c)
      acc[h][c] = accumulate ? vld1q_f32(out + h * ldo + d0 + 4 * c) : vdupq_n_f32(0.0f);
  for (int64_t j = 0; j < nk; ++j) {
    float32x4_t vv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) vv[c] = L::load(v[j], v_col + d0 + 4 * c);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const float32x4_t w = vdupq_n_f32(p[h * ldp + j]);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[h][c] = vfmaq_f32(acc[h][c], w, vv[c]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) vst1q_f32(out + h * ldo + d0 + 4 * c, acc[h][c]);
}

template <class L, int NV>
void value_tile_any(int hn, const float* p, int64_t ldp, const void* const* v, int64_t v_col, int64_t nk,
                    int d0, float* out, int64_t ldo, bool accumulate) {
  switch (hn) {
    case 4:
      return value_tile<L, 4, NV>(p, ldp, v, v_col, nk, d0, out, ldo, accumulate);
    case 3:
      return value_tile<L, 3, NV>(p, ldp, v, v_col, nk, d0, out, ldo, accumulate);
    case 2:
      return value_tile<L, 2, NV>(p, ldp, v, v_col, nk, d0, out, ldo, accumulate);
    default:
      return value_tile<L, 1, NV>(p, ldp, v, v_col, nk, d0, out, ldo, accumulate);
  }
}

template <class L>
void value_sum(const float* p, int64_t ldp, int n_rows, const void* const* v, int64_t v_col, int64_t nk,
               int width, float* out, int64_t ldo, bool accumulate) {
  for (int h0 = 0; h0 < n_rows; h0 += 4) {
    const int hn = std::min(4, n_rows - h0);
    const float* ph = p + h0 * ldp;
    float* oh = out + h0 * ldo;
    int d0 = 0;
    for (; d0 + 16 <= width; d0 += 16)
      value_tile_any<L, 4>(hn, ph, ldp, v, v_col, nk, d0, oh, ldo, accumulate);
    for (; d0 + 4 <= width; d0 += 4) value_tile_any<L, 1>(hn, ph, ldp, v, v_col, nk, d0, oh, ldo, accumulate);
    // The last < 4 columns (head widths are multiples of 16; odd test shapes only): the same FMAs.
    for (int h = 0; h < hn; ++h) {
      for (int d = d0; d < width; ++d) {
        float o = accumulate ? oh[h * ldo + d] : 0.0f;
        for (int64_t j = 0; j < nk; ++j) o = std::fma(ph[h * ldp + j], L::one(v[j], v_col + d), o);
        oh[h * ldo + d] = o;
      }
    }
  }
}

}  // namespace

void weighted_value_sum_neon(const float* p, int64_t ldp, int n_rows, GgmlType type, const void* const* v,
                             int64_t v_col, int64_t nk, int width, float* out, int64_t ldo, bool accumulate) {
  switch (type) {
    case GgmlType::F16:
      return value_sum<LoadF16>(p, ldp, n_rows, v, v_col, nk, width, out, ldo, accumulate);
    case GgmlType::BF16:
      return value_sum<LoadBF16>(p, ldp, n_rows, v, v_col, nk, width, out, ldo, accumulate);
    case GgmlType::Q8_0:
      return value_sum<LoadQ8_0>(p, ldp, n_rows, v, v_col, nk, width, out, ldo, accumulate);
    default:
      return value_sum<LoadF32>(p, ldp, n_rows, v, v_col, nk, width, out, ldo, accumulate);
  }
}

}  // namespace gem4
