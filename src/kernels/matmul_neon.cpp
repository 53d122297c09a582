// The AArch64 matrix products (every AArch64 set; see matmul_internal.h): the GGUF layout, 4 weight rows
// x up to 4 activation rows per tile. Compiled for ARMv8.0 (Advanced SIMD is part of the base); the
// dotprod and i8mm integer tiles live in their own files, compiled for those extensions.
//  * 8-bit-activation types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): the activations quantized per 32-element
//    block as scalar_int8 does (the same bits: round half to even, fp16 scales), each 4-row group of
//    weights decoded once to signed bytes (level - offset), the set's tile for the integer sums, then
//    scalar_int8's float steps per block. Every AArch64 set gives the Scalar set's results bit for bit.
//  * Q4_K, Q5_K, Q6_K: the same tiles on their 32-element sub-blocks with llama.cpp's Q8_K activations (one
//    scale per 256, as the x86 sets), sum += (d_x d sc) isum + (-dmin m)(d_x sum q) per sub-block.
//    Q6_K's scales cover 16 elements: each 16-element unit is a block of its own (its half of the 32
//    bytes, zeros in the other, the activation block repeated), twice the tile work but 8-bit math.
//  * F32, F16, BF16: weight rows in f32 (converted once per 4-row group), dots with FMA in 4 lanes, the
//    lanes added in a fixed order, then the tail.
// Batch invariance: every output is computed by the same operations whichever tile or thread it falls
// in; integer sums are exact.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/matmul_internal.h"
#include "kernels/ops_internal.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4::matmul_detail {

namespace {

constexpr int kGroupRows = 4;  // weight rows per tile
constexpr int kTileRows = 4;   // activation rows per tile
constexpr int64_t kGroupsPerChunk = 4;

const uint8_t* row_ptr(const MatrixView& w, int64_t o) {
  return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(std::min(o, w.out - 1)) * w.row_bytes;
}

// An fp16 scale as f32 with one fcvt (fp16_to_fp32 is an out-of-line call; both are exact and agree
// but for a signalling NaN, which fcvt quiets).
float half_to_float(uint16_t h) {
  __fp16 t;
  std::memcpy(&t, &h, sizeof t);
  return float(t);
}

// ---- 8-bit activations

// One 32-element block quantized as matmul.cpp's quantize_activation_block: d = amax / 127,
// q = round-half-even(x * 127 / amax), the scale and s = d * sum(q) rounded to fp16.
void quantize_block(const float* x, int8_t* q, float* d_out, float* s_out) {
  float32x4_t v[8];
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int k = 0; k < 8; ++k) {
    v[k] = vld1q_f32(x + 4 * k);
    m = vmaxq_f32(m, vabsq_f32(v[k]));
  }
  const float amax = vmaxvq_f32(m);
  const float d = amax / 127.f;
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  int32x4_t sum = vdupq_n_s32(0);
  for (int k = 0; k < 8; k += 2) {
    const int32x4_t q0 = vcvtnq_s32_f32(vmulq_n_f32(v[k], id)),
                    q1 = vcvtnq_s32_f32(vmulq_n_f32(v[k + 1], id));
    sum = vaddq_s32(sum, vaddq_s32(q0, q1));
    const int16x8_t q16 = vcombine_s16(vmovn_s32(q0), vmovn_s32(q1));
    vst1_s8(q + 4 * k, vmovn_s16(q16));
  }
  *d_out = fp16_to_fp32(fp32_to_fp16(d));
  *s_out = fp16_to_fp32(fp32_to_fp16(d * static_cast<float>(vaddvq_s32(sum))));
}

// All rows' activations: q in the tile's layout (rows, or pairs of rows, of nb * 32 bytes each), the
// scales d and sums s per row and block.
void quantize_rows(const float* x, int64_t rows, int64_t ldx, int64_t nb, bool interleaved, int8_t* q,
                   float* d, float* s) {
  if (interleaved && rows % 2) std::memset(q + (rows - 1) * nb * 32, 0, size_t(nb) * 64);
  int8_t tmp[kQK];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t i = r * nb + b;
      if (!interleaved) {
        quantize_block(x + r * ldx + b * kQK, q + i * 32, d + i, s + i);
        continue;
      }
      quantize_block(x + r * ldx + b * kQK, tmp, d + i, s + i);
      int8_t* pair = q + ((r / 2) * nb + b) * 64 + 8 * (r % 2);
      for (int c = 0; c < 4; ++c) std::memcpy(pair + 16 * c, tmp + 8 * c, 8);
    }
  }
}

// The same layout from llama.cpp's Q8_K activations (quantize_row_q8_k, one f32 scale per 256 values),
// for the K-quants: per 32-element block the super-block's d and s = d * (the block's sum of q). Q6_K
// (repeat 2) takes every block twice: its weights are split into 16-element halves (decode_group_q6k).
void quantize_rows_q8k(const float* x, int64_t rows, int64_t ldx, int64_t in, int repeat, bool interleaved,
                       int8_t* q, float* d, float* s) {
  const int64_t nb = in / kQK * repeat;
  if (interleaved && rows % 2) std::memset(q + (rows - 1) * nb * 32, 0, size_t(nb) * 64);
  std::vector<BlockQ8_K> blocks(size_t(in / kQKK));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row_q8_k(x + r * ldx, blocks.data(), in);
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_K& k = blocks[size_t(b / repeat / 8)];
      const int sub = int(b / repeat % 8);
      const int64_t i = r * nb + b;
      d[i] = k.d;
      s[i] = k.d * float(k.bsums[2 * sub] + k.bsums[2 * sub + 1]);
      const int8_t* src = k.qs + 32 * sub;
      if (!interleaved) {
        std::memcpy(q + i * 32, src, 32);
        continue;
      }
      int8_t* pair = q + ((r / 2) * nb + b) * 64 + 8 * (r % 2);
      for (int c = 0; c < 4; ++c) std::memcpy(pair + 16 * c, src + 8 * c, 8);
    }
  }
}

// Bit 4 of the levels of a Q5 block: element j gets 0x10 when bit j of qh is set.
void q5_high_bits(const uint8_t* qh, uint8x16_t* lo, uint8x16_t* hi) {
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(kBit), sixteen = vdupq_n_u8(0x10);
  *lo = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bit), sixteen);
  *hi = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bit), sixteen);
}

// Block `blk` of an 8-bit-activation type as signed bytes level - offset (elements 0-15, 16-31), its
// scale and min.
inline void decode_block(GgmlType t, const uint8_t* blk, int8x16_t* lo, int8x16_t* hi, float* d, float* m) {
  const uint8x16_t low4 = vdupq_n_u8(0x0F);
  *m = 0.0f;
  switch (t) {
    case GgmlType::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(blk);
      *d = half_to_float(b->d);
      *lo = vld1q_s8(b->qs);
      *hi = vld1q_s8(b->qs + 16);
      return;
    }
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      const uint8_t* qs;
      int offset = 0;
      if (t == GgmlType::Q4_0) {
        const auto* b = reinterpret_cast<const BlockQ4_0*>(blk);
        *d = half_to_float(b->d);
        qs = b->qs;
        offset = 8;
      } else {
        const auto* b = reinterpret_cast<const BlockQ4_1*>(blk);
        *d = half_to_float(b->d);
        *m = half_to_float(b->m);
        qs = b->qs;
      }
      const uint8x16_t u = vld1q_u8(qs);
      const int8x16_t off = vdupq_n_s8(int8_t(offset));
      *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(u, low4)), off);
      *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(u, 4)), off);
      return;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const uint8_t *qs, *qh;
      int offset = 0;
      if (t == GgmlType::Q5_0) {
        const auto* b = reinterpret_cast<const BlockQ5_0*>(blk);
        *d = half_to_float(b->d);
        qs = b->qs;
        qh = b->qh;
        offset = 16;
      } else {
        const auto* b = reinterpret_cast<const BlockQ5_1*>(blk);
        *d = half_to_float(b->d);
        *m = half_to_float(b->m);
        qs = b->qs;
        qh = b->qh;
      }
      uint8x16_t bits_lo, bits_hi;
      q5_high_bits(qh, &bits_lo, &bits_hi);
      const uint8x16_t u = vld1q_u8(qs);
      const int8x16_t off = vdupq_n_s8(int8_t(offset));
      *lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(u, low4), bits_lo)), off);
      *hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(u, 4), bits_hi)), off);
      return;
    }
    default:
      return;  // not reached: the caller checked is_int8_type
  }
}

// One block of 4 decoded weight rows (elements 0-15 in lo, 16-31 in hi) in the tile's layout.
void store_block(const int8x16_t* lo, const int8x16_t* hi, bool interleaved, int8_t* out) {
  if (!interleaved) {
    for (int j = 0; j < kGroupRows; ++j) {
      vst1q_s8(out + 32 * j, lo[j]);
      vst1q_s8(out + 32 * j + 16, hi[j]);
    }
    return;
  }
  for (int p = 0; p < 2; ++p) {
    const int64x2_t l0 = vreinterpretq_s64_s8(lo[2 * p]), l1 = vreinterpretq_s64_s8(lo[2 * p + 1]);
    const int64x2_t h0 = vreinterpretq_s64_s8(hi[2 * p]), h1 = vreinterpretq_s64_s8(hi[2 * p + 1]);
    vst1q_s8(out + 64 * p, vreinterpretq_s8_s64(vzip1q_s64(l0, l1)));
    vst1q_s8(out + 64 * p + 16, vreinterpretq_s8_s64(vzip2q_s64(l0, l1)));
    vst1q_s8(out + 64 * p + 32, vreinterpretq_s8_s64(vzip1q_s64(h0, h1)));
    vst1q_s8(out + 64 * p + 48, vreinterpretq_s8_s64(vzip2q_s64(h0, h1)));
  }
}

// 32-element sub-block b of a Q4_K or Q5_K row as unsigned levels (elements 0-15, 16-31), the
// sub-block's scale d * sc and its additive min -(dmin * m), as dequantize_row forms them.
template <GgmlType T>
void decode_k_block(const uint8_t* row, int64_t b, int8x16_t* lo, int8x16_t* hi, float* d, float* m) {
  using Block = std::conditional_t<T == GgmlType::Q5_K, BlockQ5_K, BlockQ4_K>;
  const Block& blk = reinterpret_cast<const Block*>(row)[b / 8];
  const int j = int(b % 8), c = j / 2;
  uint8_t sc, mn;
  k_quant_scale_min(j, blk.scales, &sc, &mn);
  *d = half_to_float(blk.d) * float(sc);
  *m = -(half_to_float(blk.dmin) * float(mn));
  const uint8x16_t q0 = vld1q_u8(blk.qs + 32 * c), q1 = vld1q_u8(blk.qs + 32 * c + 16);
  const uint8x16_t low4 = vdupq_n_u8(0x0F);
  uint8x16_t u0 = j % 2 ? vshrq_n_u8(q0, 4) : vandq_u8(q0, low4);
  uint8x16_t u1 = j % 2 ? vshrq_n_u8(q1, 4) : vandq_u8(q1, low4);
  if constexpr (T == GgmlType::Q5_K) {  // bit 4 of element l of sub-block j: bit j of qh[l]
    const uint8x16_t bit = vdupq_n_u8(uint8_t(1u << j)), sixteen = vdupq_n_u8(0x10);
    u0 = vorrq_u8(u0, vandq_u8(vtstq_u8(vld1q_u8(blk.qh), bit), sixteen));
    u1 = vorrq_u8(u1, vandq_u8(vtstq_u8(vld1q_u8(blk.qh + 16), bit), sixteen));
  }
  *lo = vreinterpretq_s8_u8(u0);
  *hi = vreinterpretq_s8_u8(u1);
}

// Weight rows [o0, o0 + 4) (past the end: the last row again) in the tile's layout, with their scales
// and mins per block (dw, mw: nb x 4). One copy per type, so that the decode has no type switch.
template <GgmlType T>
void decode_group_of(const MatrixView& w, int64_t o0, int64_t nb, bool interleaved, int8_t* panel, float* dw,
                     float* mw) {
  constexpr bool kK = T == GgmlType::Q4_K || T == GgmlType::Q5_K;
  const size_t block_bytes = kK ? 0 : ggml_row_bytes(T, kQK);
  const uint8_t* rows[kGroupRows];
  for (int j = 0; j < kGroupRows; ++j) rows[j] = row_ptr(w, o0 + j);
  for (int64_t b = 0; b < nb; ++b) {
    int8x16_t lo[kGroupRows], hi[kGroupRows];
    for (int j = 0; j < kGroupRows; ++j)
      if constexpr (kK) {
        decode_k_block<T>(rows[j], b, &lo[j], &hi[j], &dw[b * 4 + j], &mw[b * 4 + j]);
      } else {
        decode_block(T, rows[j] + b * block_bytes, &lo[j], &hi[j], &dw[b * 4 + j], &mw[b * 4 + j]);
      }
    store_block(lo, hi, interleaved, panel + b * 128);
  }
}

// Q6_K: its scales cover 16 elements, the tiles' blocks 32, so each 16-element unit u of a super-block
// becomes a block of its own: the unit's levels - 32 in its half of 32-element block u / 2, zeros in the
// other half (the activations hold every block twice), scale d * scales[u], no min. nb counts units.
void decode_group_q6k(const MatrixView& w, int64_t o0, int64_t nb, bool interleaved, int8_t* panel, float* dw,
                      float* mw) {
  const BlockQ6_K* rows[kGroupRows];
  for (int j = 0; j < kGroupRows; ++j) rows[j] = reinterpret_cast<const BlockQ6_K*>(row_ptr(w, o0 + j));
  int8_t levels[kGroupRows][kQKK];
  const int8x16_t zero = vdupq_n_s8(0);
  for (int64_t sb = 0; sb < nb / 16; ++sb) {
    for (int j = 0; j < kGroupRows; ++j) {
      const BlockQ6_K& blk = rows[j][sb];
      int8_t* q = levels[j];
      for (int half = 0; half < 2; ++half) {  // dequant_q6_k's element order
        const uint8_t* ql = blk.ql + 64 * half;
        const uint8_t* qh = blk.qh + 32 * half;
        for (int l = 0; l < 32; ++l) {
          q[128 * half + l] = int8_t(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
          q[128 * half + l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
          q[128 * half + l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
          q[128 * half + l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
      }
    }
    for (int u = 0; u < 16; ++u) {
      const int64_t b = sb * 16 + u;
      int8x16_t lo[kGroupRows], hi[kGroupRows];
      for (int j = 0; j < kGroupRows; ++j) {
        const int8x16_t v = vld1q_s8(levels[j] + 16 * u);
        lo[j] = u % 2 ? zero : v;
        hi[j] = u % 2 ? v : zero;
        dw[b * 4 + j] = half_to_float(rows[j][sb].d) * float(rows[j][sb].scales[u]);
        mw[b * 4 + j] = 0.0f;
      }
      store_block(lo, hi, interleaved, panel + b * 128);
    }
  }
}

void decode_group(const MatrixView& w, int64_t o0, int64_t nb, bool interleaved, int8_t* panel, float* dw,
                  float* mw) {
  switch (w.type) {
    case GgmlType::Q6_K:
      return decode_group_q6k(w, o0, nb, interleaved, panel, dw, mw);
    case GgmlType::Q8_0:
      return decode_group_of<GgmlType::Q8_0>(w, o0, nb, interleaved, panel, dw, mw);
    case GgmlType::Q4_0:
      return decode_group_of<GgmlType::Q4_0>(w, o0, nb, interleaved, panel, dw, mw);
    case GgmlType::Q4_1:
      return decode_group_of<GgmlType::Q4_1>(w, o0, nb, interleaved, panel, dw, mw);
    case GgmlType::Q5_0:
      return decode_group_of<GgmlType::Q5_0>(w, o0, nb, interleaved, panel, dw, mw);
    case GgmlType::Q4_K:
      return decode_group_of<GgmlType::Q4_K>(w, o0, nb, interleaved, panel, dw, mw);
    case GgmlType::Q5_K:
      return decode_group_of<GgmlType::Q5_K>(w, o0, nb, interleaved, panel, dw, mw);
    default:
      return decode_group_of<GgmlType::Q5_1>(w, o0, nb, interleaved, panel, dw, mw);
  }
}

void int8_matmul(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool, Int8Tile tile) {
  const bool q6k = w.type == GgmlType::Q6_K;
  const bool k_quant = w.type == GgmlType::Q4_K || w.type == GgmlType::Q5_K || q6k;
  const bool has_min = k_quant ? !q6k : int8_format(w.type).has_min;
  const int64_t nb = w.in / kQK * (q6k ? 2 : 1);  // blocks of the tiles (Q6_K: 16-element units)
  const int64_t padded_rows = tile.interleaved ? (rows + 1) / 2 * 2 : rows;
  const size_t q_bytes = size_t(padded_rows * nb) * 32;
  auto* q = static_cast<int8_t*>(thread_scratch(kSlotActivations, q_bytes + 2 * sizeof(float) * rows * nb));
  float* dx = reinterpret_cast<float*>(q + q_bytes);
  float* sx = dx + rows * nb;
  if (k_quant) {
    quantize_rows_q8k(x, rows, ldx, w.in, q6k ? 2 : 1, tile.interleaved, q, dx, sx);
  } else {
    quantize_rows(x, rows, ldx, nb, tile.interleaved, q, dx, sx);
  }
  const int64_t groups = (w.out + kGroupRows - 1) / kGroupRows;
  parallel_for(pool, groups, kGroupsPerChunk, [&](int64_t g0, int64_t g1, int) {
    const size_t panel_bytes = size_t(nb) * 128, scale_floats = size_t(nb) * 4;
    auto* panels = static_cast<int8_t*>(
        thread_scratch(kSlotPanel, kGroupsPerChunk * (panel_bytes + 2 * scale_floats * sizeof(float))));
    auto* scales = reinterpret_cast<float*>(panels + kGroupsPerChunk * panel_bytes);
    auto* isum = static_cast<int32_t*>(thread_scratch(kSlotRows, sizeof(int32_t) * kTileRows * nb * 4));
    for (int64_t gc = g0; gc < g1; gc += kGroupsPerChunk) {
      const int64_t gn = std::min(kGroupsPerChunk, g1 - gc);
      for (int64_t g = 0; g < gn; ++g) {
        float* dw = scales + 2 * g * scale_floats;
        decode_group(w, (gc + g) * kGroupRows, nb, tile.interleaved, panels + g * panel_bytes, dw,
                     dw + scale_floats);
      }
      for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
        const int nr = int(std::min<int64_t>(kTileRows, rows - r0));
        for (int64_t g = 0; g < gn; ++g) {
          const float* dw = scales + 2 * g * scale_floats;
          const float* mw = dw + scale_floats;
          tile.fn(panels + g * panel_bytes, q + r0 * nb * 32, nb, nr, isum);
          const int64_t o0 = (gc + g) * kGroupRows;
          const int valid = int(std::min<int64_t>(kGroupRows, w.out - o0));
          for (int r = 0; r < nr; ++r) {
            const float* d = dx + (r0 + r) * nb;
            const float* s = sx + (r0 + r) * nb;
            float32x4_t acc = vdupq_n_f32(0.0f);
            for (int64_t b = 0; b < nb; ++b) {
              const float32x4_t isum_f = vcvtq_f32_s32(vld1q_s32(isum + (r * nb + b) * 4));
              acc = vaddq_f32(acc, vmulq_f32(vmulq_n_f32(vld1q_f32(dw + b * 4), d[b]), isum_f));
              if (has_min) acc = vaddq_f32(acc, vmulq_n_f32(vld1q_f32(mw + b * 4), s[b]));
            }
            float out[4];
            vst1q_f32(out, acc);
            std::memcpy(y + (r0 + r) * ldy + o0, out, sizeof(float) * valid);
          }
        }
      }
    }
  });
}

// ---- f32 weights

// The dots of nr (<= 4) activation rows with 4 weight rows of length n: 4 FMA lanes per pair, added as
// (l0 + l1) + (l2 + l3), then the last n % 4 terms by scalar FMA, in order.
template <int NR>
void dot_tile(const float* const* wr, const float* x, int64_t ldx, int64_t n, float* out /* NR x 4 */) {
  // Every loop over acc unrolled: rolled, GCC kept the 4 x NR accumulators in memory and looped over
  // single FMAs (16 accumulators + 4 weights + 1 activation fit the 32 NEON registers).
  float32x4_t acc[NR][4];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[r][j] = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    float32x4_t wv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) wv[j] = vld1q_f32(wr[j] + i);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const float32x4_t xv = vld1q_f32(x + r * ldx + i);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[r][j] = vfmaq_f32(acc[r][j], xv, wv[j]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const float32x4_t a = acc[r][j];
      float s = (vgetq_lane_f32(a, 0) + vgetq_lane_f32(a, 1)) + (vgetq_lane_f32(a, 2) + vgetq_lane_f32(a, 3));
      for (int64_t k = i; k < n; ++k) s = std::fma(x[r * ldx + k], wr[j][k], s);
      out[r * 4 + j] = s;
    }
  }
}

void float_matmul(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                  ThreadPool* pool) {
  const int64_t groups = (w.out + kGroupRows - 1) / kGroupRows;
  parallel_for(pool, groups, 4, [&](int64_t g0, int64_t g1, int) {
    float* buf = w.type == GgmlType::F32
                     ? nullptr
                     : static_cast<float*>(thread_scratch(kSlotPanel, sizeof(float) * kGroupRows * w.in));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o0 = g * kGroupRows;
      const float* wr[kGroupRows];
      for (int j = 0; j < kGroupRows; ++j) {
        const uint8_t* src = row_ptr(w, o0 + j);
        if (!buf) {
          wr[j] = reinterpret_cast<const float*>(src);
          continue;
        }
        float* dst = buf + j * w.in;
        const auto* h = reinterpret_cast<const uint16_t*>(src);
        if (w.type == GgmlType::F16) {
          convert_neon::f16_to_f32(h, dst, w.in);
        } else if (w.type == GgmlType::BF16) {
          convert_neon::bf16_to_f32(h, dst, w.in);
        } else {
          dequantize_row(w.type, src, dst, w.in);
        }
        wr[j] = dst;
      }
      const int valid = int(std::min<int64_t>(kGroupRows, w.out - o0));
      for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
        const int nr = int(std::min<int64_t>(kTileRows, rows - r0));
        float out[kTileRows * 4];
        const float* xr = x + r0 * ldx;
        switch (nr) {
          case 4:
            dot_tile<4>(wr, xr, ldx, w.in, out);
            break;
          case 3:
            dot_tile<3>(wr, xr, ldx, w.in, out);
            break;
          case 2:
            dot_tile<2>(wr, xr, ldx, w.in, out);
            break;
          default:
            dot_tile<1>(wr, xr, ldx, w.in, out);
            break;
        }
        for (int r = 0; r < nr; ++r) std::memcpy(y + (r0 + r) * ldy + o0, out + r * 4, sizeof(float) * valid);
      }
    }
  });
}

}  // namespace

void matmul_neon(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool, Isa isa) {
  if (!is_int8_type(w.type) && w.type != GgmlType::Q4_K && w.type != GgmlType::Q5_K &&
      w.type != GgmlType::Q6_K)
    return float_matmul(w, x, rows, ldx, y, ldy, pool);
  const Int8Tile tile = isa == Isa::NeonI8mm      ? int8_tile_i8mm()
                        : isa == Isa::NeonDotprod ? int8_tile_dotprod()
                                                  : int8_tile_neon();
  int8_matmul(w, x, rows, ldx, y, ldy, pool, tile);
}

}  // namespace gem4::matmul_detail
