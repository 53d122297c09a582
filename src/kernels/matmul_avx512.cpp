// Matrix-product kernels for AVX-512 (F/BW/VL/DQ + VNNI), the primary path (Zen 4).
//
// Two families:
//  * Quantized weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), "int8": activations quantized
//    to 8 bits per 32-element block like llama.cpp's q8_0/q8_1; integer dot products with vpdpbusd
//    (unsigned weight levels x signed activation bytes; the weight offset, e.g. 8 for Q4_0, is folded
//    into the accumulator's starting value). Block decoding is in block_decode_avx512.h.
//  * F32, F16, BF16: weights converted to f32, then an FMA kernel (BF16 where bf16_dot_active():
//    vdpbf16ps on activations rounded to bf16, matmul_bf16_avx512.cpp).
// Each family has a streaming kernel for few activation rows (decode: weights read once, straight from
// their blocks) and a register-blocked kernel for many rows (prefill: a panel of 32 weight rows is
// repacked once per call and reused for every activation row).
//
// Batch invariance: both kernels of a family compute every (activation row, output) with the same
// sequence of float operations, so a row's result does not depend on how many rows share the call, its
// position in a tile, or the threads. Int8: per 32-element block the exact integer dot product isum
// (per 16-element half for Q6_K), then f = fma(float(isum), d_w * d_x, f) and, for types with a min,
// f = fma(m_w, s_x, f), block after block. F32 family: one FMA chain per output, k in order. Both
// kernels therefore hold one output per f32 lane (the streaming kernels transpose in registers).
// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_*) as uninitialized at -O3.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/block_decode_avx512.h"
#include "kernels/cpu_features.h"
#include "kernels/lanes_avx512.h"
#include "kernels/load_f32_avx512.h"
#include "kernels/matmul_internal.h"
#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4::matmul_detail {
namespace {

using namespace avx512;
using namespace avx512_lanes;

const uint8_t* row_ptr(const MatrixView& w, int64_t o) {
  return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(o) * w.row_bytes;
}


bool uses_int8_path(GgmlType t) {
  return is_int8_type(t) || t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}

template <class Fn>
void with_int8_decoder(GgmlType t, Fn&& fn) {
  switch (t) {
    case GgmlType::Q8_0:
      return fn(DecodeQ8_0{});
    case GgmlType::Q4_0:
      return fn(DecodeQ4_0{});
    case GgmlType::Q4_1:
      return fn(DecodeQ4_1{});
    case GgmlType::Q5_0:
      return fn(DecodeQ5_0{});
    case GgmlType::Q5_1:
      return fn(DecodeQ5_1{});
    case GgmlType::Q4_K:
      return fn(DecodeQ4_K{});
    case GgmlType::Q5_K:
      return fn(DecodeQ5_K{});
    case GgmlType::Q6_K:
      return fn(DecodeQ6_K{});
    default:
      throw std::logic_error("with_int8_decoder: not an 8-bit-activation type");
  }
}

// ------------------------------------------------------------------------------------------------
// Int8 family, many activation rows: register-blocked GEMM.
//
// A panel holds 32 weight rows repacked so that one zmm holds 4 consecutive levels of 16 rows (one row
// per 32-bit lane); vpdpbusd with a broadcast of 4 activation quants then advances 16 dot products by 4
// elements. Per 32-element block the panel stores 8 groups x 2 halves x 64 bytes of levels, then the 32
// weight scales as f32 (for Q6_K a second set for the block's upper 16 elements), then the mins.
//
// Micro-tile: 32 weight rows x 6 activation rows. Per block that is 12 int32 accumulators (restarted per
// block, because each block has its own scales) and 12 f32 sums: 24 of the 32 zmm registers, plus 2 for
// weights and 1 for the broadcast. Each 64-byte weight load feeds 6 vpdpbusd and each activation
// broadcast 2, so the loop is bound by vpdpbusd (96 per block) plus the per-block scaling (12 cvt,
// 12 mul, 12 fma), not by loads. The panel (about 1.1 KiB per block, 55 KiB for in = 1536) stays in L2
// and is reused by every activation row; the quantized activations are stored tile-major so the six
// rows of a tile are 192 contiguous bytes per block, one block after the other.

constexpr int kPanelRows = 32;
constexpr int kInt8TileRows = 6;
constexpr size_t kPanelQuantBytes = 8 * 2 * 64;

template <class Dec>
struct PanelLayout {
  static constexpr size_t kScale = kPanelQuantBytes;
  static constexpr size_t kScaleHi = kScale + 128;                          // kSplitScales only
  static constexpr size_t kMin = kScaleHi + (Dec::kSplitScales ? 128 : 0);  // kHasMin only
  static constexpr size_t kBlockBytes = kMin + (Dec::kHasMin ? 128 : 0);
};

// Quantized activations grouped by row tile: [rows / 6][nb][6] (rows padded to whole tiles), so that a
// tile reads one sequential stream, 192 bytes of quants per block. (Block-major [nb][rows] jumped
// rows x 32 bytes from block to block, which the hardware prefetchers do not follow; with in = 6144
// the activations outgrow L2 and every block was a cache miss.)
struct TileMajorActivations {
  int8_t* q;         // [tiles][nb][6][32]
  float* d;          // [tiles][nb][6]
  int32_t* init;     // [tiles][nb][6]: -offset * sum q (of the first 16 quants with split scales)
  int32_t* init_hi;  // [tiles][nb][6]: -offset * sum of the last 16 quants (split scales only)
  float* s;          // [tiles][nb][6]
  int64_t nb;
  // Index of (row r, block b) in the arrays above.
  int64_t at(int64_t r, int64_t b) const {
    return ((r / kInt8TileRows) * nb + b) * kInt8TileRows + r % kInt8TileRows;
  }
};

// Transposes 16 rows x 8 dwords into 8 vectors of 16 lanes: z[i] holds row i in its low half and row
// i + 8 in its high half; out[g] lane j is dword g of row j. Two rounds of in-lane unpacks transpose the
// 4x4 dword blocks within each 128-bit lane; one cross-lane permute per output gathers the blocks.
void transpose_16x8_dwords(const __m512i z[8], __m512i out[8]) {
  __m512i t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    // u[4i + c]: dword c (128-bit lanes 0, 2) and c + 4 (lanes 1, 3) of rows 4i..4i+3 (and + 8).
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    out[c] = _mm512_permutex2var_epi64(u[c], lo, u[4 + c]);
    out[c + 4] = _mm512_permutex2var_epi64(u[c], hi, u[4 + c]);
  }
}

// Rows beyond `count` repeat the last row: their lanes compute finite values that are never stored.
template <class Dec>
void repack_int8_panel(const MatrixView& w, int64_t o0, int count, int64_t nb, uint8_t* panel) {
  using L = PanelLayout<Dec>;
  const uint8_t* rows[kPanelRows];
  for (int j = 0; j < kPanelRows; ++j) rows[j] = row_ptr(w, o0 + std::min(j, count - 1));
  // 32 short streams at once: prefetch a few blocks ahead in each (see int8_stream_group).
  constexpr int64_t kAhead = 4;
  const size_t data_bytes = ggml_row_bytes(w.type, w.in);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* pb = panel + b * L::kBlockBytes;
    if (b + kAhead < nb) {
      const size_t off = static_cast<size_t>(b + kAhead) * data_bytes / nb;
      for (int j = 0; j < kPanelRows; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(rows[j] + off), _MM_HINT_T0);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i z[8], out[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(Dec::quants(rows[16 * h + i], b)),
                                  Dec::quants(rows[16 * h + i + 8], b), 1);
      }
      transpose_16x8_dwords(z, out);
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) _mm512_store_si512(pb + g * 128 + h * 64, out[g]);
    }
  }
  // Scales and mins, a group of blocks (a K-quant super-block) per row at a time.
  constexpr int G = Dec::kGroupBlocks;
  for (int j = 0; j < kPanelRows; ++j) {
    for (int64_t g = 0; g < nb / G; ++g) {
      float scale[G], scale_hi[G], min[G];
      Dec::group_scales(rows[j], g, scale, scale_hi, min);
      for (int i = 0; i < G; ++i) {
        uint8_t* pb = panel + (g * G + i) * L::kBlockBytes;
        reinterpret_cast<float*>(pb + L::kScale)[j] = scale[i];
        if constexpr (Dec::kSplitScales) reinterpret_cast<float*>(pb + L::kScaleHi)[j] = scale_hi[i];
        if constexpr (Dec::kHasMin) reinterpret_cast<float*>(pb + L::kMin)[j] = min[i];
      }
    }
  }
}

// Packed Q4_K/Q5_K scales and mins of rows 16h..16h+15: float(sc) * d and float(m) * -dmin, the products
// DecodeQ4_K/Q5_K form from the GGUF block (k_scales_mins). `at`: offset of the scale bytes in the block.
inline void kquant_scales_mins(const uint8_t* super, const uint8_t* blk, size_t at, int h, __m512* dw, __m512* min) {
  const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(super + 32 * h)));
  const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(super + 64 + 32 * h)));
  const __m512 neg_dmin =
      _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dmin), _mm512_set1_epi32(int(0x80000000u))));
  const __m128i sc = _mm_load_si128(reinterpret_cast<const __m128i*>(blk + at + 16 * h));
  const __m128i mn = _mm_load_si128(reinterpret_cast<const __m128i*>(blk + at + 32 + 16 * h));
  *dw = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)), d);
  *min = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)), neg_dmin);
}

// The packed formats: levels one per byte or two (nibbles); where block b starts and its scales (and
// mins) as f32 vectors for rows 0-15 and 16-31.
template <bool kNibbleLevels, int kOff>
struct PackedLegacy {  // Q8_0, Q4_0: blocks of levels then 32 fp16 scales
  static constexpr bool kNibbles = kNibbleLevels, kHasMin = false;
  static constexpr int kOffset = kOff;
  static constexpr size_t kBlockBytes = (kNibbles ? 4 : 8) * 128 + kPackedPanelRows * sizeof(uint16_t);
  static const uint8_t* block(const uint8_t* panel, int64_t b) { return panel + size_t(b) * kBlockBytes; }
  static void scales(const uint8_t*, int64_t, const uint8_t* pb, __m512* dw, __m512*) {
    const __m512i h = _mm512_load_si512(pb + kBlockBytes - 64);
    dw[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    dw[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
  }
};
using PackedQ8_0 = PackedLegacy<false, DecodeQ8_0::kOffset>;
using PackedQ4_0 = PackedLegacy<true, DecodeQ4_0::kOffset>;

struct PackedQ4_K {  // super-block header of fp16 d and dmin, then per sub-block nibbles, u8 sc and m
  static constexpr bool kNibbles = true, kHasMin = true;
  static constexpr int kOffset = DecodeQ4_K::kOffset;
  static constexpr size_t kBlockBytes = kPackedQ4KBlockBytes;
  static const uint8_t* block(const uint8_t* panel, int64_t b) {
    return panel + size_t(b / 8) * kPackedQ4KSuperBytes + kPackedQ4KHeaderBytes + size_t(b % 8) * kBlockBytes;
  }
  // scale = float(sc) * d and min = float(m) * -dmin: the products DecodeQ4_K forms from the GGUF block.
  static void scales(const uint8_t* panel, int64_t b, const uint8_t* pb, __m512* dw, __m512* mins) {
    const uint8_t* super = panel + size_t(b / 8) * kPackedQ4KSuperBytes;
    for (int h = 0; h < 2; ++h) kquant_scales_mins(super, pb, 512, h, &dw[h], &mins[h]);
  }
};

// The same panel built from a packed copy (packed_matrix.h): the levels are already interleaved, so
// Q8_0 is a copy and Q4_0/Q4_K split each byte's two nibbles into groups g and g + 4; scales (and
// Q4_K's mins) to f32.
template <class Dec>
void panel_from_packed(const MatrixView& w, int64_t p, int64_t nb, uint8_t* panel) {
  using L = PanelLayout<Dec>;
  static_assert(!Dec::kSplitScales, "Q6_K has its own: panel_from_packed_q6k");
  constexpr bool kNibbles = !std::is_same_v<Dec, DecodeQ8_0>;
  constexpr bool kF32Scales = Dec::kHasMin;  // Q4_K
  constexpr size_t kQuant = kNibbles ? 512 : 1024;
  using Fmt = std::conditional_t<std::is_same_v<Dec, DecodeQ8_0>, PackedQ8_0,
                                 std::conditional_t<std::is_same_v<Dec, DecodeQ4_0>, PackedQ4_0, PackedQ4_K>>;
  const uint8_t* base = w.packed + size_t(p) * size_t(nb) * packed_block_bytes(w.type);
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* src = Fmt::block(base, b);
    uint8_t* pb = panel + b * L::kBlockBytes;
    if constexpr (kNibbles) {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {  // i = 2 g + h
        const __m512i v = _mm512_load_si512(src + 64 * i);
        _mm512_store_si512(pb + 64 * i, _mm512_and_si512(v, low));
        _mm512_store_si512(pb + 512 + 64 * i, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
      }
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) _mm512_store_si512(pb + 64 * i, _mm512_load_si512(src + 64 * i));
    }
    if constexpr (kF32Scales) {
      __m512 dw[2], mins[2];
      Fmt::scales(base, b, src, dw, mins);
      for (int i = 0; i < 2; ++i) {
        _mm512_store_ps(pb + L::kScale + 64 * i, dw[i]);
        _mm512_store_ps(pb + L::kMin + 64 * i, mins[i]);
      }
    } else {
      const __m512i h = _mm512_load_si512(src + kQuant);
      _mm512_store_ps(pb + L::kScale, _mm512_cvtph_ps(_mm512_castsi512_si256(h)));
      _mm512_store_ps(pb + L::kScale + 64, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)));
    }
  }
}

// Packed Q6_K (packed_matrix.h): the 8 level vectors (groups G = 0..7 of 4 elements, 16 rows per
// vector) of half h of a block. Low 4 bits: the low (G < 4) or high (G >= 4) nibbles of vector G % 4;
// top 2 bits: bits 2t, 2t+1 (t = G % 4) of top-bit vector G / 4, moved to bits 4-5. The 16-bit shifts
// carry bits across bytes only into positions the masks clear.
inline void q6k_levels(const uint8_t* blk, int h, __m512i lv[8]) {
  const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i top[2] = {_mm512_load_si512(blk + 512 + h * 64), _mm512_load_si512(blk + 512 + 128 + h * 64)};
  __m512i hi[2][4];
  for (int m = 0; m < 2; ++m) {
    hi[m][0] = _mm512_and_si512(_mm512_slli_epi16(top[m], 4), m30);
    hi[m][1] = _mm512_and_si512(_mm512_slli_epi16(top[m], 2), m30);
    hi[m][2] = _mm512_and_si512(top[m], m30);
    hi[m][3] = _mm512_and_si512(_mm512_srli_epi16(top[m], 2), m30);
  }
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512i v = _mm512_load_si512(blk + g * 128 + h * 64);
    // (a & 0x0F) | b, b holding only bits 4-5.
    lv[g] = _mm512_ternarylogic_epi32(v, hi[0][g], m0f, 0xEC);
    lv[g + 4] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), hi[1][g], m0f, 0xEC);
  }
}

// Q6_K's scales of half h of a packed block, d x sc as the GGUF decoder forms them (DecodeQ6_K::scales).
inline void q6k_scales(const uint8_t* super, const uint8_t* blk, int h, __m512* lo, __m512* hi) {
  const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(super + 32 * h)));
  const __m128i sc_lo = _mm_load_si128(reinterpret_cast<const __m128i*>(blk + 768 + 16 * h));
  const __m128i sc_hi = _mm_load_si128(reinterpret_cast<const __m128i*>(blk + 800 + 16 * h));
  *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc_lo)));
  *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc_hi)));
}

// Packed Q5_K: the 8 level vectors of half h of a block, low 4 bits as for Q6_K, bit 4 from bit G of
// the top-bit vector (shifted to bit 4; 16-bit shifts carry only into bits the mask clears).
inline void q5k_levels(const uint8_t* blk, int h, __m512i lv[8]) {
  const __m512i m0f = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
  const __m512i top = _mm512_load_si512(blk + 512 + h * 64);
  const __m512i hi[8] = {_mm512_and_si512(_mm512_slli_epi16(top, 4), m10), _mm512_and_si512(_mm512_slli_epi16(top, 3), m10),
                         _mm512_and_si512(_mm512_slli_epi16(top, 2), m10), _mm512_and_si512(_mm512_slli_epi16(top, 1), m10),
                         _mm512_and_si512(top, m10),                       _mm512_and_si512(_mm512_srli_epi16(top, 1), m10),
                         _mm512_and_si512(_mm512_srli_epi16(top, 2), m10), _mm512_and_si512(_mm512_srli_epi16(top, 3), m10)};
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512i v = _mm512_load_si512(blk + g * 128 + h * 64);
    lv[g] = _mm512_ternarylogic_epi32(v, hi[g], m0f, 0xEC);  // (a & 0x0F) | b
    lv[g + 4] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), hi[g + 4], m0f, 0xEC);
  }
}

// The GEMM panel of DecodeQ5_K's layout built from a packed Q5_K copy.
void panel_from_packed_q5k(const MatrixView& w, int64_t p, int64_t nb, uint8_t* panel) {
  using L = PanelLayout<DecodeQ5_K>;
  const uint8_t* src = w.packed + size_t(p) * size_t(nb) * packed_block_bytes(w.type);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* super = src + size_t(b / 8) * kPackedQ5KSuperBytes;
    const uint8_t* blk = super + kPackedQ5KHeaderBytes + size_t(b % 8) * kPackedQ5KBlockBytes;
    uint8_t* pb = panel + b * L::kBlockBytes;
    for (int h = 0; h < 2; ++h) {
      __m512i lv[8];
      q5k_levels(blk, h, lv);
      for (int g = 0; g < 8; ++g) _mm512_store_si512(pb + g * 128 + h * 64, lv[g]);
      __m512 dw, min;
      kquant_scales_mins(super, blk, 640, h, &dw, &min);
      _mm512_store_ps(pb + L::kScale + 64 * h, dw);
      _mm512_store_ps(pb + L::kMin + 64 * h, min);
    }
  }
}

// The GEMM panel of DecodeQ6_K's layout built from a packed Q6_K copy: levels one per byte, scales f32.
void panel_from_packed_q6k(const MatrixView& w, int64_t p, int64_t nb, uint8_t* panel) {
  using L = PanelLayout<DecodeQ6_K>;
  const uint8_t* src = w.packed + size_t(p) * size_t(nb) * packed_block_bytes(w.type);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* super = src + size_t(b / 8) * kPackedQ6KSuperBytes;
    const uint8_t* blk = super + kPackedQ6KHeaderBytes + size_t(b % 8) * kPackedQ6KBlockBytes;
    uint8_t* pb = panel + b * L::kBlockBytes;
    for (int h = 0; h < 2; ++h) {
      __m512i lv[8];
      q6k_levels(blk, h, lv);
      for (int g = 0; g < 8; ++g) _mm512_store_si512(pb + g * 128 + h * 64, lv[g]);
      __m512 lo, hi;
      q6k_scales(super, blk, h, &lo, &hi);
      _mm512_store_ps(pb + L::kScale + 64 * h, lo);
      _mm512_store_ps(pb + L::kScaleHi + 64 * h, hi);
    }
  }
}

template <class Dec, int N>
void int8_tile(const uint8_t* panel, int64_t nb, const TileMajorActivations& act, int64_t rows, int64_t r0,
               float* y, int64_t ldy, int valid) {
  using L = PanelLayout<Dec>;
  __m512 f0[N], f1[N];
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) f0[n] = f1[n] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = panel + b * L::kBlockBytes;
    const int64_t meta = act.at(r0, b);
    const int8_t* xb = act.q + meta * kQK;
    // Integer dot products over groups [g0, g1) of 4 elements, then scaled into the f32 sums.
    auto span = [&](int g0, int g1, const int32_t* init, size_t scale_at) {
      __m512i a0[N], a1[N];
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) a0[n] = a1[n] = _mm512_set1_epi32(init[meta + n]);
#pragma GCC unroll 8
      for (int g = g0; g < g1; ++g) {
        const __m512i w0 = _mm512_load_si512(pb + g * 128);
        const __m512i w1 = _mm512_load_si512(pb + g * 128 + 64);
#pragma GCC unroll 8
        for (int n = 0; n < N; ++n) {
          const __m512i xv = _mm512_set1_epi32(load_i32(xb + n * kQK + g * 4));
          a0[n] = _mm512_dpbusd_epi32(a0[n], w0, xv);
          a1[n] = _mm512_dpbusd_epi32(a1[n], w1, xv);
        }
      }
      const __m512 dw0 = _mm512_load_ps(pb + scale_at);
      const __m512 dw1 = _mm512_load_ps(pb + scale_at + 64);
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) {
        const __m512 dx = _mm512_set1_ps(act.d[meta + n]);
        f0[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[n]), _mm512_mul_ps(dw0, dx), f0[n]);
        f1[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[n]), _mm512_mul_ps(dw1, dx), f1[n]);
      }
    };
    if constexpr (Dec::kSplitScales) {
      span(0, 4, act.init, L::kScale);
      span(4, 8, act.init_hi, L::kScaleHi);
    } else {
      span(0, 8, act.init, L::kScale);
    }
    if constexpr (Dec::kHasMin) {
      const __m512 m0 = _mm512_load_ps(pb + L::kMin);
      const __m512 m1 = _mm512_load_ps(pb + L::kMin + 64);
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) {
        const __m512 sx = _mm512_set1_ps(act.s[meta + n]);
        f0[n] = _mm512_fmadd_ps(m0, sx, f0[n]);
        f1[n] = _mm512_fmadd_ps(m1, sx, f1[n]);
      }
    }
  }
  const __mmask16 k0 = lane_mask_lo(valid), k1 = lane_mask_hi(valid);
  for (int n = 0; n < N; ++n) {
    _mm512_mask_storeu_ps(y + n * ldy, k0, f0[n]);
    _mm512_mask_storeu_ps(y + n * ldy + 16, k1, f1[n]);
  }
}

template <class Dec>
void int8_tile_any(int n, const uint8_t* panel, int64_t nb, const TileMajorActivations& act, int64_t rows,
                   int64_t r0, float* y, int64_t ldy, int valid) {
  switch (n) {
    case 6:
      return int8_tile<Dec, 6>(panel, nb, act, rows, r0, y, ldy, valid);
    case 5:
      return int8_tile<Dec, 5>(panel, nb, act, rows, r0, y, ldy, valid);
    case 4:
      return int8_tile<Dec, 4>(panel, nb, act, rows, r0, y, ldy, valid);
    case 3:
      return int8_tile<Dec, 3>(panel, nb, act, rows, r0, y, ldy, valid);
    case 2:
      return int8_tile<Dec, 2>(panel, nb, act, rows, r0, y, ldy, valid);
    default:
      return int8_tile<Dec, 1>(panel, nb, act, rows, r0, y, ldy, valid);
  }
}

// How the panels x activation-row chunks are split into tasks. Normally each thread takes whole panels
// (each weight byte is read and repacked once); with too few panels to keep every thread busy the
// activation rows are split as well.
struct TaskSplit {
  int64_t n_panels, row_chunks, chunk_rows;
};

TaskSplit split_tasks(int64_t out, int64_t rows, ThreadPool* pool, int tile_rows) {
  const int threads = pool ? pool->size() : 1;
  TaskSplit s;
  s.n_panels = (out + kPanelRows - 1) / kPanelRows;
  s.row_chunks = (threads > 1 && s.n_panels < 8 * threads) ? threads : 1;
  const int64_t per_chunk = (rows + s.row_chunks - 1) / s.row_chunks;
  s.chunk_rows = (per_chunk + tile_rows - 1) / tile_rows * tile_rows;
  return s;
}

template <class Dec>
void int8_gemm(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
               ThreadPool* pool) {
  const int64_t nb = w.in / kQK;
  const int64_t padded_rows = (rows + kInt8TileRows - 1) / kInt8TileRows * kInt8TileRows;
  const size_t q_bytes = static_cast<size_t>(padded_rows * nb * kQK);
  const size_t meta = static_cast<size_t>(padded_rows * nb);
  auto* buf = static_cast<uint8_t*>(thread_scratch(kSlotActivations, q_bytes + meta * 16));
  TileMajorActivations act;
  act.nb = nb;
  act.q = reinterpret_cast<int8_t*>(buf);
  act.d = reinterpret_cast<float*>(buf + q_bytes);
  act.init = reinterpret_cast<int32_t*>(act.d + meta);
  act.init_hi = act.init + meta;
  act.s = reinterpret_cast<float*>(act.init_hi + meta);
  parallel_for(pool, rows, 8, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t m = act.at(r, b);
        const QuantizedBlock qb = quantize_block(x + r * ldx + b * kQK, act.q + m * kQK);
        act.d[m] = qb.d;
        act.s[m] = qb.s;
        act.init[m] = -Dec::kOffset * (Dec::kSplitScales ? qb.sum - qb.sum_hi : qb.sum);
        act.init_hi[m] = -Dec::kOffset * qb.sum_hi;
      }
    }
  });

  const TaskSplit split = split_tasks(w.out, rows, pool, kInt8TileRows);
  auto run_tasks = [&](int64_t t0, int64_t t1, int) {
    auto* panel = static_cast<uint8_t*>(thread_scratch(kSlotPanel, nb * PanelLayout<Dec>::kBlockBytes));
    int64_t built = -1;  // the panel in `panel`
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / split.row_chunks, c = t % split.row_chunks;
      const int64_t o0 = p * kPanelRows;
      const int count = static_cast<int>(std::min<int64_t>(kPanelRows, w.out - o0));
      if (p != built) {
        constexpr bool kHasPackedLayout = std::is_same_v<Dec, DecodeQ8_0> || std::is_same_v<Dec, DecodeQ4_0> ||
                                          std::is_same_v<Dec, DecodeQ4_K>;
        if (std::is_same_v<Dec, DecodeQ6_K> && w.packed) {
          panel_from_packed_q6k(w, p, nb, panel);
        } else if (std::is_same_v<Dec, DecodeQ5_K> && w.packed) {
          panel_from_packed_q5k(w, p, nb, panel);
        } else if (kHasPackedLayout && w.packed) {
          if constexpr (kHasPackedLayout) panel_from_packed<Dec>(w, p, nb, panel);
        } else {
          repack_int8_panel<Dec>(w, o0, count, nb, panel);
        }
        built = p;
      }
      const int64_t r_end = std::min(rows, (c + 1) * split.chunk_rows);
      for (int64_t r = c * split.chunk_rows; r < r_end; r += kInt8TileRows) {
        const int n = static_cast<int>(std::min<int64_t>(kInt8TileRows, r_end - r));
        int8_tile_any<Dec>(n, panel, nb, act, rows, r, y + r * ldy + o0, ldy, count);
      }
    }
  };
  // Tasks handed out one at a time: on a shared machine a core that loses time to another process
  // takes fewer panels instead of holding up the barrier. (A task is a panel x row chunk, ~0.1 ms.)
  const int64_t n_tasks = split.n_panels * split.row_chunks;
  if (pool) {
    pool->parallel_for_dynamic(n_tasks, 1, run_tasks);
  } else {
    run_tasks(0, n_tasks, 0);
  }
}

// ------------------------------------------------------------------------------------------------
// Int8 family, few activation rows (decode), legacy types: weights streamed straight from their blocks,
// each byte read once. Batch invariance requires exactly the tile's arithmetic per (row, output): per
// block the exact integer dot product, then f = fma(float(isum), d_w * d_x, f), then (types with a min)
// f = fma(m_w, s_x, f), blocks in order. So 16 weight rows are processed at once, one per f32 lane like
// the tile: vpdpbusd on each row's block pair gives 8 partial sums per block, a reduction tree of
// unpacks (exact, integers) turns the 16 rows x 2 blocks into two vectors of per-block sums with row j
// in lane j, and the scales of the 16 rows are gathered into the same layout.

constexpr int kInt8StreamMaxRows = 4;
constexpr int kStreamRows = 16;


struct alignas(64) PairActivations {
  int8_t q[64];
  int32_t init[16];  // -offset * (sum of the lane's 4 quants): the weight offset's share of each lane
  float d[2];        // the two blocks' scales
  float s[2];        // fp16(d * sum q) of each block (types with a min)
};

void quantize_pairs(const float* x, int64_t rows, int64_t ldx, int64_t nb, int offset, PairActivations* out) {
  const int64_t np = (nb + 1) / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t p = 0; p < np; ++p) {
      PairActivations& pa = out[r * np + p];
      std::memset(&pa, 0, sizeof pa);  // also zeroes block 1 of an odd tail
      for (int half = 0; half < 2 && 2 * p + half < nb; ++half) {
        const QuantizedBlock qb = quantize_block(x + r * ldx + (2 * p + half) * kQK, pa.q + 32 * half);
        pa.d[half] = qb.d;
        pa.s[half] = qb.s;
      }
      const __m512i lane_sums =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_load_si512(pa.q));
      _mm512_store_si512(pa.init, _mm512_mullo_epi32(lane_sums, _mm512_set1_epi32(-offset)));
    }
  }
}

// v[j] (j < 16): 16 lanes of partial sums of row j, 4 lanes per quarter (16 elements) of a block pair.
// Returns the quarter sums with row j in lane j: q[0], q[1] block 0's halves, q[2], q[3] block 1's.
void reduce_quarter_sums(__m512i v[16], __m512i q[4]) {
  __m512i t[8], u[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                            _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // 128-bit lane L: quarter L's sums of rows 4i..4i+3
    u[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
                            _mm512_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
  }
  const __m512i even01 = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i even23 = _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i odd01 = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1));
  const __m512i odd23 = _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1));
  q[0] = _mm512_shuffle_i32x4(even01, even23, _MM_SHUFFLE(2, 0, 2, 0));
  q[2] = _mm512_shuffle_i32x4(even01, even23, _MM_SHUFFLE(3, 1, 3, 1));
  q[1] = _mm512_shuffle_i32x4(odd01, odd23, _MM_SHUFFLE(2, 0, 2, 0));
  q[3] = _mm512_shuffle_i32x4(odd01, odd23, _MM_SHUFFLE(3, 1, 3, 1));
}

// The scales (and mins) of one block pair for 16 weight rows, row j in lane j, in the tile's values.
struct PairScales {
  __m512 d[2], d_hi[2], m[2];  // per block of the pair; d_hi with split scales only, m with a min only
};

// Weight rows [o0, o0 + count) (count <= 16) against R activation rows.
template <class Dec, int R>
void int8_stream_group(const MatrixView& w, int64_t o0, int count, const PairActivations* act, int64_t nb,
                       float* y, int64_t ldy) {
  const int64_t np = (nb + 1) / 2;
  const uint8_t* row[kStreamRows];
  alignas(64) int32_t offsets[kStreamRows];
  for (int j = 0; j < kStreamRows; ++j) {
    const int jj = std::min(j, count - 1);  // past the last row, repeat it: computed, not stored
    row[j] = row_ptr(w, o0 + jj);
    offsets[j] = static_cast<int32_t>(static_cast<size_t>(jj) * w.row_bytes);
  }
  const __m512i vindex = _mm512_load_si512(offsets);
  const uint8_t* base = row_ptr(w, o0);
  __m512 f[R];
  for (int r = 0; r < R; ++r) f[r] = _mm512_setzero_ps();
  // Short rows read 16 at a time: fetch the next 16 rows at the same position (hardware prefetchers
  // do not ramp up on such short streams).
  const bool prefetch = o0 + 2 * kStreamRows <= w.out;
  const size_t ahead = kStreamRows * w.row_bytes;

  // One block pair of all 16 rows: u[j] the levels of row j, sc the scales.
  auto accumulate = [&](int64_t p, bool two, const __m512i* u, const PairScales& sc) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const PairActivations& a = act[r * np + p];
      const __m512i init = _mm512_load_si512(a.init), q = _mm512_load_si512(a.q);
      __m512i acc[kStreamRows], quarter[4];
#pragma GCC unroll 16
      for (int j = 0; j < kStreamRows; ++j) acc[j] = _mm512_dpbusd_epi32(init, u[j], q);
      reduce_quarter_sums(acc, quarter);
      for (int h = 0; h < (two ? 2 : 1); ++h) {
        const __m512 dx = _mm512_set1_ps(a.d[h]);
        if constexpr (Dec::kSplitScales) {
          f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(quarter[2 * h]), _mm512_mul_ps(sc.d[h], dx), f[r]);
          f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(quarter[2 * h + 1]), _mm512_mul_ps(sc.d_hi[h], dx), f[r]);
        } else {
          const __m512i isum = _mm512_add_epi32(quarter[2 * h], quarter[2 * h + 1]);
          f[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sc.d[h], dx), f[r]);
        }
        if constexpr (Dec::kHasMin) f[r] = _mm512_fmadd_ps(sc.m[h], _mm512_set1_ps(a.s[h]), f[r]);
      }
    }
  };

  const int64_t n_groups = (nb + 2 * Dec::kPairsPerGroup - 1) / (2 * Dec::kPairsPerGroup);
  for (int64_t g = 0; g < n_groups; ++g) {
    const size_t pos = static_cast<size_t>(g) * Dec::kGroupBytes;
    if (prefetch) {
#pragma GCC unroll 16
      for (int j = 0; j < kStreamRows; ++j) {
        for (size_t off = 0; off < Dec::kGroupBytes; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row[j] + ahead + pos + off), _MM_HINT_T0);
        if constexpr (Dec::kGroupBytes % 64 != 0)
          _mm_prefetch(reinterpret_cast<const char*>(row[j] + ahead + pos + Dec::kGroupBytes - 1), _MM_HINT_T0);
      }
    }
    __m512i u[kStreamRows];
    __m512 unused_scale, unused_min;
    PairScales sc;
    if constexpr (Dec::kGroupBlocks == 1) {  // legacy: a group is one block pair
      const bool two = 2 * g + 1 < nb;
#pragma GCC unroll 16
      for (int j = 0; j < kStreamRows; ++j) {
        if (two) {
          Dec::pair(Dec::group(row[j], g), 0, &u[j], &unused_scale, &unused_min);
        } else {
          Dec::single(row[j], 2 * g, &u[j], &unused_scale, &unused_min);
        }
      }
      // fp16 scale (low half) and min (high half, the "_1" types) at the start of each block.
      const __m512i h0 = _mm512_i32gather_epi32(vindex, base + pos, 1);
      const __m512i h1 = two ? _mm512_i32gather_epi32(vindex, base + pos + Dec::kBytes, 1) : h0;
      sc.d[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h0));
      sc.d[1] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h1));
      if constexpr (Dec::kHasMin) {
        sc.m[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h0, 16)));
        sc.m[1] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h1, 16)));
      }
      accumulate(g, two, u, sc);
    } else {  // K-quants: a group is a super-block of 4 pairs; its scales transposed to row-per-lane
      typename Dec::Group grp[kStreamRows];
      __m512 t[kStreamRows];
#pragma GCC unroll 16
      for (int j = 0; j < kStreamRows; ++j) {
        grp[j] = Dec::group(row[j], g);
        if constexpr (Dec::kSplitScales) {
          t[j] = grp[j].scales;  // d * scale of each 16 elements
        } else {
          t[j] = grp[j].scales_mins;  // 8 scales, 8 negated mins
        }
      }
      transpose_16x16(t);
#pragma GCC unroll 4
      for (int k = 0; k < Dec::kPairsPerGroup; ++k) {
#pragma GCC unroll 16
        for (int j = 0; j < kStreamRows; ++j) Dec::pair(grp[j], k, &u[j], &unused_scale, &unused_min);
        for (int h = 0; h < 2; ++h) {
          const int b = 2 * k + h;  // block within the super-block
          if constexpr (Dec::kSplitScales) {
            sc.d[h] = t[2 * b];
            sc.d_hi[h] = t[2 * b + 1];
          } else {
            sc.d[h] = t[b];
            sc.m[h] = t[8 + b];
          }
        }
        accumulate(g * Dec::kPairsPerGroup + k, true, u, sc);
      }
    }
  }
  const __mmask16 k = lane_mask_lo(count);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * ldy + o0, k, f[r]);
}

template <class Dec>
void int8_stream(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool) {
  const int64_t nb = w.in / kQK, np = (nb + 1) / 2;
  auto* act =
      static_cast<PairActivations*>(thread_scratch(kSlotActivations, sizeof(PairActivations) * rows * np));
  quantize_pairs(x, rows, ldx, nb, Dec::kOffset, act);
  const int64_t groups = (w.out + kStreamRows - 1) / kStreamRows;
  parallel_for(pool, groups, 1, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o0 = g * kStreamRows;
      const int count = static_cast<int>(std::min<int64_t>(kStreamRows, w.out - o0));
      switch (rows) {
        case 1:
          int8_stream_group<Dec, 1>(w, o0, count, act, nb, y, ldy);
          break;
        case 2:
          int8_stream_group<Dec, 2>(w, o0, count, act, nb, y, ldy);
          break;
        case 3:
          int8_stream_group<Dec, 3>(w, o0, count, act, nb, y, ldy);
          break;
        default:
          int8_stream_group<Dec, 4>(w, o0, count, act, nb, y, ldy);
          break;
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------
// Int8 family, few activation rows, packed weights (Q8_0, Q4_0, Q4_K; Q6_K below; packed_matrix.h). A
// panel's block is read front to back with aligned loads: each 64-byte vector is 16 rows x 4 levels
// (Q4_0/Q4_K: x 8 levels, two nibbles), one vpdpbusd per activation row and vector, no shuffles. The
// arithmetic is the tile's: per block the exact integer sum (split over two accumulators to shorten
// the dependency chain; integer adds are exact), then f = fma(float(isum), d_w * d_x, f), and for Q4_K
// f = fma(min_w, s_x, f).

// Software prefetch distances of the packed GEMV, in 64-byte lines: into L1 2 KiB ahead of the block
// being read and into L2 8 KiB ahead, so that each core keeps more misses in flight than the hardware
// prefetcher starts on its own. In gem4_kernel_bench (interleaved repetitions) the L1 prefetch was worth
// ~20 % on Q4_0 and the L2 one another ~7 % (2-4 % on Q8_0); prefetchnta halved the speed.
constexpr size_t kGemvPrefetchLines = 32, kGemvPrefetchL2Lines = 128;

struct BlockActivations {
  int8_t* q;      // [rows][nb][32]
  float* d;       // [rows][nb]
  int32_t* init;  // [rows][nb]: -offset * sum q
  float* s;       // [rows][nb]: fp16(d * sum q), for the mins
};

template <class Fmt, int R>
void packed_gemv_panel(const uint8_t* panel, int64_t nb, const BlockActivations& act, float* y, int64_t ldy,
                       int valid) {
  constexpr bool kNibbles = Fmt::kNibbles;
  constexpr int kGroups = kNibbles ? 4 : 8;
  constexpr size_t kBlock = Fmt::kBlockBytes;
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 f0[R], f1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) f0[r] = f1[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = Fmt::block(panel, b);
#pragma GCC unroll 17
    for (size_t line = 0; line < kBlock; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(pb + kGemvPrefetchLines * 64 + line), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pb + kGemvPrefetchL2Lines * 64 + line), _MM_HINT_T1);
    }
    __m512i a0[R], a1[R], c0[R], c1[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      a0[r] = a1[r] = _mm512_set1_epi32(act.init[r * nb + b]);
      c0[r] = c1[r] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int g = 0; g < kGroups; ++g) {
      const __m512i v0 = _mm512_load_si512(pb + g * 128), v1 = _mm512_load_si512(pb + g * 128 + 64);
      if constexpr (kNibbles) {
        // High nibbles are used in place, as 16 x level (at most 240, still a byte): their sums c0, c1
        // are multiples of 16 and are divided back exactly below, one shift instead of one per vector.
        const __m512i lo0 = _mm512_and_si512(v0, low), hi0 = _mm512_andnot_si512(low, v0);
        const __m512i lo1 = _mm512_and_si512(v1, low), hi1 = _mm512_andnot_si512(low, v1);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const int8_t* xq = act.q + (size_t(r) * nb + b) * kQK;
          const __m512i xl = _mm512_set1_epi32(load_i32(xq + 4 * g));
          const __m512i xh = _mm512_set1_epi32(load_i32(xq + 16 + 4 * g));
          a0[r] = _mm512_dpbusd_epi32(a0[r], lo0, xl);
          a1[r] = _mm512_dpbusd_epi32(a1[r], lo1, xl);
          c0[r] = _mm512_dpbusd_epi32(c0[r], hi0, xh);
          c1[r] = _mm512_dpbusd_epi32(c1[r], hi1, xh);
        }
      } else {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512i xv = _mm512_set1_epi32(load_i32(act.q + (size_t(r) * nb + b) * kQK + 4 * g));
          if (g % 2 == 0) {
            a0[r] = _mm512_dpbusd_epi32(a0[r], v0, xv);
            a1[r] = _mm512_dpbusd_epi32(a1[r], v1, xv);
          } else {
            c0[r] = _mm512_dpbusd_epi32(c0[r], v0, xv);
            c1[r] = _mm512_dpbusd_epi32(c1[r], v1, xv);
          }
        }
      }
    }
    __m512 dw[2], mins[2];
    Fmt::scales(panel, b, pb, dw, mins);
    const __m512 dw0 = dw[0], dw1 = dw[1], m0 = mins[0], m1 = mins[1];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if constexpr (kNibbles) {
        c0[r] = _mm512_srai_epi32(c0[r], 4);  // exact: 16 x the high nibbles' sum
        c1[r] = _mm512_srai_epi32(c1[r], 4);
      }
      const __m512 dx = _mm512_set1_ps(act.d[r * nb + b]);
      f0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0[r], c0[r])), _mm512_mul_ps(dw0, dx), f0[r]);
      f1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a1[r], c1[r])), _mm512_mul_ps(dw1, dx), f1[r]);
      if constexpr (Fmt::kHasMin) {
        const __m512 sx = _mm512_set1_ps(act.s[r * nb + b]);
        f0[r] = _mm512_fmadd_ps(m0, sx, f0[r]);
        f1[r] = _mm512_fmadd_ps(m1, sx, f1[r]);
      }
    }
  }
  const __mmask16 k0 = lane_mask_lo(valid), k1 = lane_mask_hi(valid);
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, k0, f0[r]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, k1, f1[r]);
  }
}

template <class Fmt>
void packed_gemv(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool) {
  const int64_t nb = w.in / kQK;
  const int offset = Fmt::kOffset;
  const size_t meta = size_t(rows * nb);
  auto* buf = static_cast<uint8_t*>(thread_scratch(kSlotActivations, meta * (kQK + 12)));
  BlockActivations act;
  act.q = reinterpret_cast<int8_t*>(buf);
  act.d = reinterpret_cast<float*>(buf + meta * kQK);
  act.init = reinterpret_cast<int32_t*>(act.d + meta);
  act.s = reinterpret_cast<float*>(act.init + meta);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const QuantizedBlock qb = quantize_block(x + r * ldx + b * kQK, act.q + (r * nb + b) * kQK);
      act.d[r * nb + b] = qb.d;
      act.init[r * nb + b] = -offset * qb.sum;
      act.s[r * nb + b] = qb.s;
    }
  }
  const int64_t panels = (w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  const size_t panel_bytes = size_t(nb) * packed_block_bytes(w.type);
  parallel_for_dynamic(pool, panels, 8, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* panel = w.packed + size_t(p) * panel_bytes;
      const int64_t o0 = p * kPackedPanelRows;
      const int valid = static_cast<int>(std::min<int64_t>(kPackedPanelRows, w.out - o0));
      switch (rows) {
        case 1:
          packed_gemv_panel<Fmt, 1>(panel, nb, act, y + o0, ldy, valid);
          break;
        case 2:
          packed_gemv_panel<Fmt, 2>(panel, nb, act, y + o0, ldy, valid);
          break;
        case 3:
          packed_gemv_panel<Fmt, 3>(panel, nb, act, y + o0, ldy, valid);
          break;
        default:
          packed_gemv_panel<Fmt, 4>(panel, nb, act, y + o0, ldy, valid);
          break;
      }
    }
  });
}

// Packed Q6_K, few activation rows: per block and half of the panel, the 8 level vectors
// (q6k_levels), groups 0-3 into the lower-half sum and 4-7 into the upper-half sum, then the tile's
// float steps: f = fma(float(isum_lo), d_lo * d_x, f), f = fma(float(isum_hi), d_hi * d_x, f).
struct SplitActivations {
  int8_t* q;         // [rows][nb][32]
  float* d;          // [rows][nb]
  int32_t* init;     // [rows][nb]: -32 * sum of the block's first 16 quants
  int32_t* init_hi;  // [rows][nb]: -32 * sum of the last 16
};

template <int R>
void packed_q6k_gemv_panel(const uint8_t* panel, int64_t nb, const SplitActivations& act, float* y, int64_t ldy,
                           int valid) {
  __m512 f[2][R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) f[0][r] = f[1][r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* super = panel + size_t(b / 8) * kPackedQ6KSuperBytes;
    const uint8_t* blk = super + kPackedQ6KHeaderBytes + size_t(b % 8) * kPackedQ6KBlockBytes;
#pragma GCC unroll 14
    for (size_t line = 0; line < kPackedQ6KBlockBytes + 64; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(blk + kGemvPrefetchLines * 64 + line), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(blk + kGemvPrefetchL2Lines * 64 + line), _MM_HINT_T1);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i lv[8];
      q6k_levels(blk, h, lv);
      __m512 dw_lo, dw_hi;
      q6k_scales(super, blk, h, &dw_lo, &dw_hi);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const size_t m = size_t(r) * nb + b;
        const int8_t* xq = act.q + m * kQK;
        __m512i lo = _mm512_set1_epi32(act.init[m]), hi = _mm512_set1_epi32(act.init_hi[m]);
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          lo = _mm512_dpbusd_epi32(lo, lv[g], _mm512_set1_epi32(load_i32(xq + 4 * g)));
          hi = _mm512_dpbusd_epi32(hi, lv[g + 4], _mm512_set1_epi32(load_i32(xq + 16 + 4 * g)));
        }
        const __m512 dx = _mm512_set1_ps(act.d[m]);
        f[h][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(dw_lo, dx), f[h][r]);
        f[h][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(dw_hi, dx), f[h][r]);
      }
    }
  }
  const __mmask16 k0 = lane_mask_lo(valid), k1 = lane_mask_hi(valid);
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, k0, f[0][r]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, k1, f[1][r]);
  }
}

// Packed Q5_K, few activation rows: the 8 level vectors per block and half (q5k_levels), one sum per
// block, then f = fma(float(isum), d_w * d_x, f) and f = fma(min_w, s_x, f), as the tile does.
template <int R>
void packed_q5k_gemv_panel(const uint8_t* panel, int64_t nb, const BlockActivations& act, float* y, int64_t ldy,
                           int valid) {
  __m512 f[2][R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) f[0][r] = f[1][r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* super = panel + size_t(b / 8) * kPackedQ5KSuperBytes;
    const uint8_t* blk = super + kPackedQ5KHeaderBytes + size_t(b % 8) * kPackedQ5KBlockBytes;
#pragma GCC unroll 12
    for (size_t line = 0; line < kPackedQ5KBlockBytes + 64; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(blk + kGemvPrefetchLines * 64 + line), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(blk + kGemvPrefetchL2Lines * 64 + line), _MM_HINT_T1);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i lv[8];
      q5k_levels(blk, h, lv);
      __m512 dw, min;
      kquant_scales_mins(super, blk, 640, h, &dw, &min);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const size_t m = size_t(r) * nb + b;
        const int8_t* xq = act.q + m * kQK;
        __m512i a = _mm512_set1_epi32(act.init[m]), c = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          a = _mm512_dpbusd_epi32(a, lv[g], _mm512_set1_epi32(load_i32(xq + 4 * g)));
          c = _mm512_dpbusd_epi32(c, lv[g + 4], _mm512_set1_epi32(load_i32(xq + 16 + 4 * g)));
        }
        const __m512 dx = _mm512_set1_ps(act.d[m]);
        f[h][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a, c)), _mm512_mul_ps(dw, dx), f[h][r]);
        f[h][r] = _mm512_fmadd_ps(min, _mm512_set1_ps(act.s[m]), f[h][r]);
      }
    }
  }
  const __mmask16 k0 = lane_mask_lo(valid), k1 = lane_mask_hi(valid);
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, k0, f[0][r]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, k1, f[1][r]);
  }
}

void packed_q5k_gemv(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                     ThreadPool* pool) {
  const int64_t nb = w.in / kQK;
  const size_t meta = size_t(rows * nb);
  auto* buf = static_cast<uint8_t*>(thread_scratch(kSlotActivations, meta * (kQK + 12)));
  BlockActivations act;
  act.q = reinterpret_cast<int8_t*>(buf);
  act.d = reinterpret_cast<float*>(buf + meta * kQK);
  act.init = reinterpret_cast<int32_t*>(act.d + meta);
  act.s = reinterpret_cast<float*>(act.init + meta);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const QuantizedBlock qb = quantize_block(x + r * ldx + b * kQK, act.q + (r * nb + b) * kQK);
      act.d[r * nb + b] = qb.d;
      act.init[r * nb + b] = -DecodeQ5_K::kOffset * qb.sum;
      act.s[r * nb + b] = qb.s;
    }
  }
  const int64_t panels = (w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  const size_t panel_bytes = size_t(nb) * packed_block_bytes(w.type);
  parallel_for_dynamic(pool, panels, 8, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* panel = w.packed + size_t(p) * panel_bytes;
      const int64_t o0 = p * kPackedPanelRows;
      const int valid = static_cast<int>(std::min<int64_t>(kPackedPanelRows, w.out - o0));
      switch (rows) {
        case 1:
          packed_q5k_gemv_panel<1>(panel, nb, act, y + o0, ldy, valid);
          break;
        case 2:
          packed_q5k_gemv_panel<2>(panel, nb, act, y + o0, ldy, valid);
          break;
        case 3:
          packed_q5k_gemv_panel<3>(panel, nb, act, y + o0, ldy, valid);
          break;
        default:
          packed_q5k_gemv_panel<4>(panel, nb, act, y + o0, ldy, valid);
          break;
      }
    }
  });
}

void packed_q6k_gemv(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                     ThreadPool* pool) {
  const int64_t nb = w.in / kQK;
  const size_t meta = size_t(rows * nb);
  auto* buf = static_cast<uint8_t*>(thread_scratch(kSlotActivations, meta * (kQK + 12)));
  SplitActivations act;
  act.q = reinterpret_cast<int8_t*>(buf);
  act.d = reinterpret_cast<float*>(buf + meta * kQK);
  act.init = reinterpret_cast<int32_t*>(act.d + meta);
  act.init_hi = act.init + meta;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const QuantizedBlock qb = quantize_block(x + r * ldx + b * kQK, act.q + (r * nb + b) * kQK);
      act.d[r * nb + b] = qb.d;
      act.init[r * nb + b] = -DecodeQ6_K::kOffset * (qb.sum - qb.sum_hi);
      act.init_hi[r * nb + b] = -DecodeQ6_K::kOffset * qb.sum_hi;
    }
  }
  const int64_t panels = (w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  const size_t panel_bytes = size_t(nb) * packed_block_bytes(w.type);
  parallel_for_dynamic(pool, panels, 8, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* panel = w.packed + size_t(p) * panel_bytes;
      const int64_t o0 = p * kPackedPanelRows;
      const int valid = static_cast<int>(std::min<int64_t>(kPackedPanelRows, w.out - o0));
      switch (rows) {
        case 1:
          packed_q6k_gemv_panel<1>(panel, nb, act, y + o0, ldy, valid);
          break;
        case 2:
          packed_q6k_gemv_panel<2>(panel, nb, act, y + o0, ldy, valid);
          break;
        case 3:
          packed_q6k_gemv_panel<3>(panel, nb, act, y + o0, ldy, valid);
          break;
        default:
          packed_q6k_gemv_panel<4>(panel, nb, act, y + o0, ldy, valid);
          break;
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------
// F32 family: F32, F16 and BF16 weights, converted exactly to f32.

void convert_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

void convert_bf16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

// F16/BF16 rows to f32 (F32 rows are used in place).
void convert_row_f32(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  if (t == GgmlType::F16) {
    convert_f16(reinterpret_cast<const uint16_t*>(src), dst, n);
  } else {
    convert_bf16(reinterpret_cast<const uint16_t*>(src), dst, n);
  }
}

// F32 family, many activation rows: register-blocked GEMM on a transposed f32 panel.
//
// The panel holds 32 weight rows as [in][32] floats, so one k step is two aligned zmm loads. The
// activations are packed once per call into groups of 12 rows stored [in][12], so a tile's broadcasts
// come from one contiguous stream. Micro-tile 32 x 12: 24 accumulators + 2 weight registers + 1
// broadcast = 27 of 32 zmm; 24 FMAs per 2 panel loads and 12 broadcast loads keep the two FMA pipes
// (not the load ports) the limit. The panel (128 B per k, 192 KiB for in = 1536) lives in L2.

constexpr int kF32TileRows = 12;

template <int N>
void f32_tile(const float* panel, const float* xp, int64_t n, float* y, int64_t ldy, int valid) {
  __m512 c0[N], c1[N];
#pragma GCC unroll 12
  for (int i = 0; i < N; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; ++k) {
    const __m512 w0 = _mm512_load_ps(panel + k * kPanelRows);
    const __m512 w1 = _mm512_load_ps(panel + k * kPanelRows + 16);
#pragma GCC unroll 12
    for (int i = 0; i < N; ++i) {
      const __m512 xv = _mm512_set1_ps(xp[k * N + i]);
      c0[i] = _mm512_fmadd_ps(w0, xv, c0[i]);
      c1[i] = _mm512_fmadd_ps(w1, xv, c1[i]);
    }
  }
  const __mmask16 k0 = lane_mask_lo(valid), k1 = lane_mask_hi(valid);
  for (int i = 0; i < N; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, k0, c0[i]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, k1, c1[i]);
  }
}

void f32_tile_any(int rows, const float* panel, const float* xp, int64_t n, float* y, int64_t ldy,
                  int valid) {
  switch (rows) {
    case 12:
      return f32_tile<12>(panel, xp, n, y, ldy, valid);
    case 11:
      return f32_tile<11>(panel, xp, n, y, ldy, valid);
    case 10:
      return f32_tile<10>(panel, xp, n, y, ldy, valid);
    case 9:
      return f32_tile<9>(panel, xp, n, y, ldy, valid);
    case 8:
      return f32_tile<8>(panel, xp, n, y, ldy, valid);
    case 7:
      return f32_tile<7>(panel, xp, n, y, ldy, valid);
    case 6:
      return f32_tile<6>(panel, xp, n, y, ldy, valid);
    case 5:
      return f32_tile<5>(panel, xp, n, y, ldy, valid);
    case 4:
      return f32_tile<4>(panel, xp, n, y, ldy, valid);
    case 3:
      return f32_tile<3>(panel, xp, n, y, ldy, valid);
    case 2:
      return f32_tile<2>(panel, xp, n, y, ldy, valid);
    default:
      return f32_tile<1>(panel, xp, n, y, ldy, valid);
  }
}

// Panel = 32 weight rows as [in][32] floats. Rows are converted 16 at a time into `rowbuf` (unless
// already f32) and transposed 16x16 blocks at a time. Rows beyond `count` repeat the last row.
void build_f32_panel(const MatrixView& w, int64_t o0, int count, float* panel, float* rowbuf) {
  const int64_t n = w.in;
  for (int h = 0; h < 2; ++h) {
    const float* src[16];
    for (int j = 0; j < 16; ++j) {
      const int64_t o = o0 + std::min(16 * h + j, count - 1);
      if (w.type == GgmlType::F32) {
        src[j] = reinterpret_cast<const float*>(row_ptr(w, o));
      } else {
        convert_row_f32(w.type, row_ptr(w, o), rowbuf + j * n, n);
        src[j] = rowbuf + j * n;
      }
    }
    for (int64_t k0 = 0; k0 < n; k0 += 16) {
      const int len = static_cast<int>(std::min<int64_t>(16, n - k0));
      const __mmask16 m = static_cast<__mmask16>((1u << len) - 1);
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) r[j] = _mm512_maskz_loadu_ps(m, src[j] + k0);
      transpose_16x16(r);
      for (int i = 0; i < len; ++i) _mm512_store_ps(panel + (k0 + i) * kPanelRows + 16 * h, r[i]);
    }
  }
}

void f32_gemm(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
              ThreadPool* pool) {
  const int64_t n = w.in;
  const int64_t n_groups = (rows + kF32TileRows - 1) / kF32TileRows;
  auto* xp = static_cast<float*>(thread_scratch(kSlotActivations, sizeof(float) * rows * n));
  parallel_for(pool, n_groups, 1, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r0 = g * kF32TileRows;
      const int nr = static_cast<int>(std::min<int64_t>(kF32TileRows, rows - r0));
      float* dst = xp + r0 * n;
      for (int64_t k = 0; k < n; ++k)
        for (int i = 0; i < nr; ++i) dst[k * nr + i] = x[(r0 + i) * ldx + k];
    }
  });
  const TaskSplit split = split_tasks(w.out, rows, pool, kF32TileRows);
  parallel_for(pool, split.n_panels * split.row_chunks, 1, [&](int64_t t0, int64_t t1, int) {
    auto* panel = static_cast<float*>(thread_scratch(kSlotPanel, sizeof(float) * n * kPanelRows));
    auto* rowbuf = static_cast<float*>(thread_scratch(kSlotRows, sizeof(float) * n * 16));
    int64_t built = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / split.row_chunks, c = t % split.row_chunks;
      const int64_t o0 = p * kPanelRows;
      const int count = static_cast<int>(std::min<int64_t>(kPanelRows, w.out - o0));
      if (p != built) {
        build_f32_panel(w, o0, count, panel, rowbuf);
        built = p;
      }
      const int64_t r_end = std::min(rows, (c + 1) * split.chunk_rows);
      for (int64_t r = c * split.chunk_rows; r < r_end; r += kF32TileRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kF32TileRows, r_end - r));
        f32_tile_any(nr, panel, xp + r * n, n, y + r * ldy + o0, ldy, count);
      }
    }
  });
}

// F32 family, few activation rows (decode): the tile's arithmetic (per output one FMA chain over k in
// order, see f32_tile) on weights read straight from their rows. 16 weight rows at a time, one per lane:
// 16 x 16 blocks are loaded (converted to f32 in registers) and transposed, then each k step is one FMA
// per activation row with a broadcast activation, exactly as the tile does from its panel.

constexpr int kF32StreamMaxRows = 4;

// Loaders of 16 weights as f32: load_f32_avx512.h.
using avx512_rows::LoadBF16;
using avx512_rows::LoadF16;
using avx512_rows::LoadF32;

constexpr int64_t kPrefetchElems = 128;
template <class L, int R>
void f32_stream_group(const MatrixView& w, int64_t o0, int count, const float* x, int64_t ldx, float* y,
                      int64_t ldy) {
  using T = typename L::T;
  const int64_t n = w.in;
  const T* row[16];
  for (int j = 0; j < 16; ++j) row[j] = reinterpret_cast<const T*>(row_ptr(w, o0 + std::min(j, count - 1)));
  const bool prefetch = o0 + 32 <= w.out;
  const size_t ahead = 16 * w.row_bytes;
  __m512 c[R];
  for (int r = 0; r < R; ++r) c[r] = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < n; k0 += 16) {
    const int len = static_cast<int>(std::min<int64_t>(16, n - k0));
    const __mmask16 m = static_cast<__mmask16>((1u << len) - 1);
    __m512 t[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      // Two prefetches: this row 128 elements ahead into L1 (16 rows are streamed at once, too many
      // for the hardware prefetchers to follow well), and the next group's row at this k into L2.
      // Against the next-group prefetch alone, F32 rows stream ~40 % faster (gem4_kernel_bench).
      _mm_prefetch(reinterpret_cast<const char*>(row[j] + k0 + kPrefetchElems), _MM_HINT_T0);
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(row[j] + k0) + ahead, _MM_HINT_T1);
      t[j] = L::load(row[j] + k0, m);
    }
    transpose_16x16(t);
    if (len == 16) {
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) c[r] = _mm512_fmadd_ps(t[i], _mm512_set1_ps(x[r * ldx + k0 + i]), c[r]);
      }
    } else {
      for (int i = 0; i < len; ++i) {
        for (int r = 0; r < R; ++r) c[r] = _mm512_fmadd_ps(t[i], _mm512_set1_ps(x[r * ldx + k0 + i]), c[r]);
      }
    }
  }
  const __mmask16 k = lane_mask_lo(count);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * ldy + o0, k, c[r]);
}

template <class L>
void f32_stream(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                ThreadPool* pool) {
  parallel_for(pool, (w.out + 15) / 16, 1, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o0 = 16 * g;
      const int count = static_cast<int>(std::min<int64_t>(16, w.out - o0));
      switch (rows) {
        case 1:
          f32_stream_group<L, 1>(w, o0, count, x, ldx, y, ldy);
          break;
        case 2:
          f32_stream_group<L, 2>(w, o0, count, x, ldx, y, ldy);
          break;
        case 3:
          f32_stream_group<L, 3>(w, o0, count, x, ldx, y, ldy);
          break;
        default:
          f32_stream_group<L, 4>(w, o0, count, x, ldx, y, ldy);
          break;
      }
    }
  });
}

}  // namespace

void matmul_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                   ThreadPool* pool) {
  if (w.packed && rows <= kInt8StreamMaxRows && packable_type(w.type)) {
    switch (w.type) {
      case GgmlType::Q8_0:
        return packed_gemv<PackedQ8_0>(w, x, rows, ldx, y, ldy, pool);
      case GgmlType::Q4_0:
        return packed_gemv<PackedQ4_0>(w, x, rows, ldx, y, ldy, pool);
      case GgmlType::Q4_K:
        return packed_gemv<PackedQ4_K>(w, x, rows, ldx, y, ldy, pool);
      case GgmlType::Q5_K:
        return packed_q5k_gemv(w, x, rows, ldx, y, ldy, pool);
      case GgmlType::Q6_K:
        return packed_q6k_gemv(w, x, rows, ldx, y, ldy, pool);
      default:
        throw std::logic_error(std::string("matmul_avx512: no packed kernel for ") + ggml_type_name(w.type));
    }
  }
  if (uses_int8_path(w.type)) {
    with_int8_decoder(w.type, [&](auto dec) {
      using Dec = decltype(dec);
      if (rows <= kInt8StreamMaxRows) return int8_stream<Dec>(w, x, rows, ldx, y, ldy, pool);
      int8_gemm<Dec>(w, x, rows, ldx, y, ldy, pool);
    });
    return;
  }
  if (w.type == GgmlType::BF16 && bf16_dot_active()) return matmul_bf16_avx512(w, x, rows, ldx, y, ldy, pool);
  if (rows > kF32StreamMaxRows) return f32_gemm(w, x, rows, ldx, y, ldy, pool);
  switch (w.type) {
    case GgmlType::F32:
      return f32_stream<LoadF32>(w, x, rows, ldx, y, ldy, pool);
    case GgmlType::F16:
      return f32_stream<LoadF16>(w, x, rows, ldx, y, ldy, pool);
    case GgmlType::BF16:
      return f32_stream<LoadBF16>(w, x, rows, ldx, y, ldy, pool);
    default:
      throw std::logic_error(std::string("matmul_avx512: no kernel for ") + ggml_type_name(w.type));
  }
}

}  // namespace gem4::matmul_detail
