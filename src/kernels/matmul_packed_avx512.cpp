// Int8 kernels on weights packed at load time (packed_matrix.h), AVX-512: the decode GEMVs that stream
// the packed copies, and the conversion of a packed panel into the int8 GEMM's register panel
// (int8_panel_avx512.h). Every kernel here performs, per (activation row, output), exactly the float
// operations of the GGUF-layout kernels in matmul_avx512.cpp, so packed and unpacked results agree bit
// for bit (tests/matmul_test.cpp checks it on every type and shape).
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
#include "kernels/gemv_prefetch_x86.h"
#include "kernels/gemv_streams.h"
#include "kernels/int8_panel_avx512.h"
#include "kernels/lanes_avx512.h"
#include "kernels/matmul_internal.h"
#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"

namespace gem4::matmul_detail {
namespace {

using namespace avx512;
using namespace avx512_lanes;

// ------------------------------------------------------------------------------------------------
// Packed layouts read into the GEMM's register panels.

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
  static constexpr bool kNibbles = kNibbleLevels, kHasMin = false, kActivationsQ8K = false;
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
  static constexpr bool kNibbles = true, kHasMin = true, kActivationsQ8K = DecodeQ4_K::kActivationsQ8K;
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

// The packed copy is read from memory once per call as the panels are built: prefetched 2 KiB ahead
// into L1 and 8 KiB into L2, as the GEMV does (the hardware prefetchers stop at 4 KiB pages; the
// 256-bit sets' unpacking spent 16 % of an E4B prompt waiting without it).
inline void prefetch_ahead(const uint8_t* p, size_t bytes) {
  for (size_t line = 0; line < bytes; line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + 2048 + line), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + 8192 + line), _MM_HINT_T1);
  }
}

// The GEMM panel built from a packed copy (packed_matrix.h): the levels are already interleaved, so
// Q8_0 is a copy and Q4_0/Q4_K split each byte's two nibbles into groups g and g + 4; scales (and
// Q4_K's mins) as the decode kernels form them.
template <class Dec>
void panel_from_packed_legacy(const MatrixView& w, int64_t p, int64_t nb, uint8_t* panel) {
  using L = PanelLayout<Dec>;
  static_assert(!Dec::kSplitScales, "Q6_K has its own: panel_from_packed_planes");
  constexpr bool kNibbles = !std::is_same_v<Dec, DecodeQ8_0>;
  using Fmt = std::conditional_t<std::is_same_v<Dec, DecodeQ8_0>, PackedQ8_0,
                                 std::conditional_t<std::is_same_v<Dec, DecodeQ4_0>, PackedQ4_0, PackedQ4_K>>;
  const uint8_t* base = w.packed + size_t(p) * size_t(nb) * packed_block_bytes(w.type);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const size_t block_bytes = packed_block_bytes(w.type);  // a call: not once per block
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* src = Fmt::block(base, b);
    uint8_t* pb = panel + b * L::kBlockBytes;
    prefetch_ahead(src, block_bytes);
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
    __m512 dw[2], mins[2];
    Fmt::scales(base, b, src, dw, mins);
    for (int i = 0; i < 2; ++i) {
      _mm512_store_ps(pb + L::kScale + 64 * i, dw[i]);
      if constexpr (Dec::kHasMin) _mm512_store_ps(pb + L::kMin + 64 * i, mins[i]);
    }
  }
}

// Packed Q6_K (packed_matrix.h): level slot s of half h is line 2s + h and holds group kQ6KSlotGroup[s]
// in bits 0-5; groups 6 and 7 take bits 0-1, 2-3, 4-5 from bits 6-7 of slots 0, 2, 4 and 1, 3, 5. The
// 16-bit shifts carry bits across bytes only into positions the masks clear.
inline __m512i q6k_low6(__m512i slot) { return _mm512_and_si512(slot, _mm512_set1_epi8(0x3F)); }
inline __m512i q6k_carried(__m512i a, __m512i b, __m512i c) {
  const __m512i a01 = _mm512_and_si512(_mm512_srli_epi16(a, 6), _mm512_set1_epi8(0x03));
  // (x & mask) | y, twice
  const __m512i b23 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(b, 4), _mm512_set1_epi8(0x0C), a01, 0xEA);
  return _mm512_ternarylogic_epi32(_mm512_srli_epi16(c, 2), _mm512_set1_epi8(0x30), b23, 0xEA);
}
// The 8 level vectors (groups G = 0..7 of 4 elements, 16 rows per vector) of half h of a block.
inline void q6k_levels(const uint8_t* blk, int h, __m512i lv[8]) {
  __m512i slot[6];
#pragma GCC unroll 6
  for (int s = 0; s < 6; ++s) {
    slot[s] = _mm512_load_si512(blk + s * 128 + h * 64);
    lv[kQ6KSlotGroup[s]] = q6k_low6(slot[s]);
  }
  lv[6] = q6k_carried(slot[0], slot[2], slot[4]);
  lv[7] = q6k_carried(slot[1], slot[3], slot[5]);
}

// Groups g and g + 4 (what q6k_levels gives as lv[g], lv[g + 4]) from the level slots that slot(s)
// gives for one half: loaded from the block, or lines already held in registers.
template <class Slot>
inline void q6k_group_levels(Slot slot, int g, __m512i* lo, __m512i* hi) {
  if (g < 2) {
    *lo = q6k_low6(slot(2 * g));
    *hi = q6k_low6(slot(2 * g + 1));
  } else {
    const __m512i own = slot(g + 2);  // slot 4 (group 2) or 5 (group 3)
    *lo = q6k_low6(own);
    *hi = q6k_carried(slot(g - 2), slot(g), own);
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

// Groups g and g + 4 of half h (q5k_levels' lv[g], lv[g + 4]) from nibble vector v = line 2g + h and the
// top-bit vector t = line 8 + h: bits g and g + 4 of it.
inline void q5k_group_levels(__m512i v, __m512i t, int g, __m512i* lo, __m512i* hi) {
  const __m512i m0f = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
  *lo = _mm512_ternarylogic_epi32(v, _mm512_and_si512(_mm512_slli_epi16(t, 4 - g), m10), m0f, 0xEC);
  *hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), _mm512_and_si512(_mm512_srli_epi16(t, g), m10),
                                  m0f, 0xEC);
}
inline void q5k_group_levels(const uint8_t* blk, int g, int h, __m512i* lo, __m512i* hi) {
  q5k_group_levels(_mm512_load_si512(blk + g * 128 + h * 64), _mm512_load_si512(blk + 512 + h * 64), g, lo,
                   hi);
}

// Packed Q5_K and Q6_K, the formats whose levels need their top bits added (q5k_levels, q6k_levels):
// where block b starts, its level vectors, and two f32 vectors per half h: Q6_K the scales of the lower
// and upper 16 elements, Q5_K the scale and the min. finish() applies a block's two integer sums (the
// lower and upper 16 elements) to the f32 sum exactly as the tile does.
struct PlanesQ5_K {
  using Dec = DecodeQ5_K;
  static constexpr size_t kSuperBytes = kPackedQ5KSuperBytes, kHeaderBytes = kPackedQ5KHeaderBytes;
  static constexpr size_t kBlockBytes = kPackedQ5KBlockBytes;
  static void levels(const uint8_t* blk, int h, __m512i lv[8]) { q5k_levels(blk, h, lv); }
  static void group_levels(const uint8_t* blk, int g, int h, __m512i* lo, __m512i* hi) {
    q5k_group_levels(blk, g, h, lo, hi);
  }
  static void scales(const uint8_t* super, const uint8_t* blk, int h, __m512* dw, __m512* min) {
    kquant_scales_mins(super, blk, 640, h, dw, min);
  }
  // f = fma(float(isum), d_w * d_x, f), then f = fma(min_w, s_x, f).
  static __m512 finish(__m512 f, __m512i lo, __m512i hi, __m512 dw, __m512 min, __m512 dx, __m512 sx) {
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), _mm512_mul_ps(dw, dx), f);
    return _mm512_fmadd_ps(min, sx, f);
  }
};
struct PlanesQ6_K {
  using Dec = DecodeQ6_K;
  static constexpr size_t kSuperBytes = kPackedQ6KSuperBytes, kHeaderBytes = kPackedQ6KHeaderBytes;
  static constexpr size_t kBlockBytes = kPackedQ6KBlockBytes;
  static void levels(const uint8_t* blk, int h, __m512i lv[8]) { q6k_levels(blk, h, lv); }
  static void group_levels(const uint8_t* blk, int g, int h, __m512i* lo, __m512i* hi) {
    q6k_group_levels([&](int s) { return _mm512_load_si512(blk + s * 128 + h * 64); }, g, lo, hi);
  }
  static void scales(const uint8_t* super, const uint8_t* blk, int h, __m512* lo, __m512* hi) {
    q6k_scales(super, blk, h, lo, hi);
  }
  // f = fma(float(isum_lo), d_lo * d_x, f), then f = fma(float(isum_hi), d_hi * d_x, f).
  static __m512 finish(__m512 f, __m512i lo, __m512i hi, __m512 d_lo, __m512 d_hi, __m512 dx, __m512) {
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(d_lo, dx), f);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(d_hi, dx), f);
  }
};

template <class K>
const uint8_t* planes_block(const uint8_t* panel, int64_t b, const uint8_t** super) {
  *super = panel + size_t(b / 8) * K::kSuperBytes;
  return *super + K::kHeaderBytes + size_t(b % 8) * K::kBlockBytes;
}

// The GEMM panel of the decoder's layout built from a packed Q5_K / Q6_K copy: levels one per byte,
// the second f32 vector stored as the Q6_K upper-half scales or the Q5_K mins.
template <class K>
void panel_from_packed_planes(const MatrixView& w, int64_t p, int64_t nb, uint8_t* panel) {
  using L = PanelLayout<typename K::Dec>;
  constexpr size_t kSecond = K::Dec::kSplitScales ? L::kScaleHi : L::kMin;
  const uint8_t* src = w.packed + size_t(p) * size_t(nb) * packed_block_bytes(w.type);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* super;
    const uint8_t* blk = planes_block<K>(src, b, &super);
    uint8_t* pb = panel + b * L::kBlockBytes;
    prefetch_ahead(blk, K::kBlockBytes);
    for (int h = 0; h < 2; ++h) {
      __m512i lv[8];
      K::levels(blk, h, lv);
      for (int g = 0; g < 8; ++g) _mm512_store_si512(pb + g * 128 + h * 64, lv[g]);
      __m512 first, second;
      K::scales(super, blk, h, &first, &second);
      _mm512_store_ps(pb + L::kScale + 64 * h, first);
      _mm512_store_ps(pb + kSecond + 64 * h, second);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Int8 family, few activation rows, packed weights (Q8_0, Q4_0, Q4_K; Q6_K below; packed_matrix.h). A
// panel's block is read front to back with aligned loads: each 64-byte vector is 16 rows x 4 levels
// (Q4_0/Q4_K: x 8 levels, two nibbles), one vpdpbusd per activation row and vector, no shuffles. The
// arithmetic is the tile's: per block the exact integer sum (split over two accumulators to shorten
// the dependency chain; integer adds are exact), then f = fma(float(isum), d_w * d_x, f), and for Q4_K
// f = fma(min_w, s_x, f).
//
// The scales are loaded after the levels (keep_load_order): GCC had hoisted the scale line, the block's
// last, above four of its eight level lines. Measured on a Zen 5 VM (2 vCPU), tokens alternated between
// the two orders inside one `gem4 bench -p 0 -n 128 -r 2` (median of 128 pairs' time ratios, both
// orders of each pair): E2B Q4_0 0.962 and 1 / 1.036 of the time, Q8_0 0.947, E4B Q4_0 0.962, 26B-A4B
// Q4_0 0.967 and 1 / 1.042; Q4_K (E2B Q4_K_M) 1 / 1.007, no change. Alone, against a plain read of the same
// bytes alternated with it (/tmp harness, 40 rounds): a 65536 x 4096 Q4_0 product 0.834 -> 0.919 of the
// read, 65536 x 2048 Q8_0 0.891 -> 0.946.

// The activation rows quantized per 32-element block, as the kernels below read them.
struct PackedActivations {
  int8_t* q;         // [rows][nb][32]
  float* d;          // [rows][nb]
  int32_t* init;     // [rows][nb]: -offset * sum q (Q6_K: of the block's first 16 quants)
  int32_t* init_hi;  // [rows][nb]: Q6_K: -offset * sum of the last 16 quants
  float* s;          // [rows][nb]: d * sum q, for the mins (see QuantizedBlock)
};

// Block b of a panel (32 weight rows x 32 inputs) against R activation rows: adds the products to the
// f32 sums f0[r] (rows 0-15 of the panel) and f1[r] (rows 16-31).
template <class Fmt, int R>
inline void packed_gemv_block(const uint8_t* panel, int64_t b, int64_t nb, const PackedActivations& act,
                              __m512* f0, __m512* f1) {
  constexpr bool kNibbles = Fmt::kNibbles;
  constexpr int kGroups = kNibbles ? 4 : 8;
  const __m512i low = _mm512_set1_epi8(0x0F);
  const uint8_t* pb = Fmt::block(panel, b);
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
  keep_load_order();
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
    f0[r] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0[r], c0[r])), _mm512_mul_ps(dw0, dx), f0[r]);
    f1[r] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a1[r], c1[r])), _mm512_mul_ps(dw1, dx), f1[r]);
    if constexpr (Fmt::kHasMin) {
      const __m512 sx = _mm512_set1_ps(act.s[r * nb + b]);
      f0[r] = _mm512_fmadd_ps(m0, sx, f0[r]);
      f1[r] = _mm512_fmadd_ps(m1, sx, f1[r]);
    }
  }
}

inline void store_panel_sums(float* y, int valid, __m512 f0, __m512 f1) {
  _mm512_mask_storeu_ps(y, lane_mask_lo(valid), f0);
  _mm512_mask_storeu_ps(y + 16, lane_mask_hi(valid), f1);
}

template <class Fmt, int R, GemvPrefetch kPf>
void packed_gemv_panel(const uint8_t* panel, int64_t nb, const PackedActivations& act, float* y, int64_t ldy,
                       int valid) {
  __m512 f0[R], f1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) f0[r] = f1[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    gemv_prefetch<kPf>(Fmt::block(panel, b), Fmt::kBlockBytes);
    packed_gemv_block<Fmt, R>(panel, b, nb, act, f0, f1);
  }
  for (int r = 0; r < R; ++r) store_panel_sums(y + r * ldy, valid, f0[r], f1[r]);
}

// S panels against one activation row, their blocks taken in turn (block b of each panel, then block
// b + 1): S streams from memory at once instead of one, each followed by the L2 streamer, so a core has
// more lines on their way (measured in matmul.cpp, at gemv_prefetch_amd). step(panel, b, &f0, &f1)
// prefetches and adds block b's products to a panel's sums, as the one-panel kernels do: the same bits.
template <int S, class Step>
void packed_gemv_panels(const uint8_t* const* panel, int64_t nb, float* const* y, const int* valid,
                        Step step) {
  __m512 f0[S], f1[S];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) f0[s] = f1[s] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) step(panel[s], b, &f0[s], &f1[s]);
  }
  for (int s = 0; s < S; ++s) store_panel_sums(y[s], valid[s], f0[s], f1[s]);
}

// Packed Q5_K / Q6_K, few activation rows: per block, groups 0-3 into the lower-half sums and 4-7 into
// the upper-half sums of each half of the panel (each starting from its share of -offset * sum q; Q5_K's
// offset is 0), then K::finish, the tile's float steps. A block is read in address order, the groups
// outer and the two halves inner (a group's 128 bytes are the halves side by side). Reading it half by
// half, in two strided passes (even lines, then odd ones), as this kernel did before, streamed from
// memory more slowly. Measured on a Zen 5 VM: a packed 65536 x 1536 Q6_K matrix alternated with the
// two-pass order in one process (20-30 pairs, the order within a pair alternating): 1 row 0.75-0.78 ->
// 0.91-0.92 of the read loop around it (another run +12 %), 2 rows +9 %, 4 rows +11 %; E2B Q4_K_M decode,
// each order forced for a whole `gem4 bench -p 0 -n 32 -r 3 --products` run, twice each: 46.8-48.5 ->
// 52.1-52.8 GB/s of weights, its Q6_K LM head 45.3-46.9 -> 56.2-57.9 GB/s; tokens alternated between the
// orders in one run (median of 64 pairs): E2B Q4_K_M 0.93-0.95 of the time, E2B Q4_0 (its LM head is
// Q6_K) 0.95-0.96, E4B Q4_0 0.96.
// With one row this kernel loaded a block's twelve level lines first, in order, into registers (from
// 2026-12-06: then 0.966-0.988 of the time per token against the per-group loads, with the prefetches
// of that time); with page-head prefetches and the panels handed out in shares (gemv_streams.h) the
// per-group loads, as with more rows, won again on the same Zen 5 VM (2026-12-07): the rotated 65536 x
// 1536 matrix (6 copies, cold) 0.83-0.88 of the time, tokens alternated in one `gem4 bench -p 0 -n 128 -r
// 2 --prune 1` (median of 128 pairs) E2B Q4_0 0.963, 0.968, Q4_K_M 0.954, 0.974, E4B Q4_0 0.977, 26B-A4B
// Q4_0 0.975, 0.984. Prefetching the lines one to four blocks ahead into L1 beside them gained nothing
// more (0.88-0.93 alone); the scale line kept after the levels, 0.996-0.999 (within the noise).
// Block b of a packed Q5_K / Q6_K panel against R activation rows: adds the products to f0[r] (rows
// 0-15) and f1[r] (rows 16-31).
template <class K, int R>
inline void packed_planes_gemv_block(const uint8_t* panel, int64_t b, int64_t nb,
                                     const PackedActivations& act, __m512* f0, __m512* f1) {
  const uint8_t* super;
  const uint8_t* blk = planes_block<K>(panel, b, &super);
  __m512i lo[2][R], hi[2][R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    lo[0][r] = lo[1][r] = _mm512_set1_epi32(act.init[r * nb + b]);
    hi[0][r] = hi[1][r] = _mm512_set1_epi32(act.init_hi[r * nb + b]);
  }
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i l, u;
      K::group_levels(blk, g, h, &l, &u);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = act.q + (size_t(r) * nb + b) * kQK;
        lo[h][r] = _mm512_dpbusd_epi32(lo[h][r], l, _mm512_set1_epi32(load_i32(xq + 4 * g)));
        hi[h][r] = _mm512_dpbusd_epi32(hi[h][r], u, _mm512_set1_epi32(load_i32(xq + 16 + 4 * g)));
      }
    }
  }
  keep_load_order();  // the scale line (12) after the levels, as in packed_gemv_block
  __m512* f[2] = {f0, f1};
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m512 first, second;
    K::scales(super, blk, h, &first, &second);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const size_t m = size_t(r) * nb + b;
      f[h][r] = K::finish(f[h][r], lo[h][r], hi[h][r], first, second, _mm512_set1_ps(act.d[m]),
                          _mm512_set1_ps(act.s[m]));
    }
  }
}

template <class K, int R, GemvPrefetch kPf>
void packed_planes_gemv_panel(const uint8_t* panel, int64_t nb, const PackedActivations& act, float* y,
                              int64_t ldy, int valid) {
  __m512 f0[R], f1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) f0[r] = f1[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* super;
    gemv_prefetch<kPf>(planes_block<K>(panel, b, &super), K::kBlockBytes + 64);
    packed_planes_gemv_block<K, R>(panel, b, nb, act, f0, f1);
  }
  for (int r = 0; r < R; ++r) store_panel_sums(y + r * ldy, valid, f0[r], f1[r]);
}

// The decode kernels' common driver: quantize the activation rows once, then hand out the panels of
// one or more products of them (matmul_shared_input: q/k/v, gate/up), numbered product after product.
// Kernel: kOffset, kSplitScales and panel<R>(panel, nb, act, y, ldy, valid) for R = 1..4 rows.
template <class Kernel>
void packed_gemv_run(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                     ThreadPool* pool) {
  const int64_t nb = targets[0].w.in / kQK;
  const size_t meta = size_t(rows * nb);
  // Inside matmul_group the quantized input is kept for the group's next piece on the same input
  // (group_input). 26B-A4B decode quantized each row ~20 times per group.
  constexpr int kFormat =
      1 << 16 | int(Kernel::kActivationsQ8K) | int(Kernel::kSplitScales) << 1 | Kernel::kOffset << 2;
  const GroupInput where = group_input(x, rows, ldx, nb, kFormat);
  auto* buf = static_cast<uint8_t*>(
      thread_scratch(where == GroupInput::Outside ? kSlotActivations : kSlotGroupInput, meta * (kQK + 16)));
  PackedActivations act;
  act.q = reinterpret_cast<int8_t*>(buf);
  act.d = reinterpret_cast<float*>(buf + meta * kQK);
  act.init = reinterpret_cast<int32_t*>(act.d + meta);
  act.init_hi = act.init + meta;
  act.s = reinterpret_cast<float*>(act.init_hi + meta);
  for (int64_t r = 0; r < rows && where != GroupInput::Held; ++r) {
    quantize_row_blocks<Kernel::kActivationsQ8K>(x + r * ldx, nb, act.q + r * nb * kQK, kQK,
                                                 [&](int64_t b, const QuantizedBlock& qb) {
                                                   const size_t m = size_t(r * nb + b);
                                                   act.d[m] = qb.d;
                                                   act.init[m] = -Kernel::kOffset *
                                                                 (Kernel::kSplitScales ? qb.sum - qb.sum_hi : qb.sum);
                                                   act.init_hi[m] = -Kernel::kOffset * qb.sum_hi;
                                                   act.s[m] = qb.s;
                                                 });
  }
  int64_t first_panel[kMaxSharedTargets + 1] = {0};
  for (int j = 0; j < count; ++j) {
    first_panel[j + 1] = first_panel[j] + (targets[j].w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  }
  const size_t panel_bytes = size_t(nb) * packed_block_bytes(targets[0].w.type);
  // A thread's chunk [p0, p1) of the panels: with one activation row Kernel::kStreams panels at a time
  // (packed_gemv_panels), then what is left of the chunk in fewer; with more rows, or what is left,
  // panel by panel.
  const auto run_chunk = [&](int64_t p0, int64_t p1, int) {
    int j = 0;
    int64_t p = p0;
    if constexpr (Kernel::kStreams > 1) {
      const auto run_panels = [&](int n, const uint8_t* const* pn, float* const* ys, const int* valid) {
        if (n == 8) Kernel::template panels<8>(pn, nb, act, ys, valid);
        if (n == 4) Kernel::template panels<4>(pn, nb, act, ys, valid);
        if (n == 2) Kernel::template panels<2>(pn, nb, act, ys, valid);
      };
      if (rows == 1)
        p = run_panels_in_streams<Kernel::kStreams>(targets, first_panel, panel_bytes, p, p1, run_panels);
    }
    for (; p < p1; ++p) {
      while (p >= first_panel[j + 1]) ++j;
      const MatrixView& w = targets[j].w;
      const int64_t local = p - first_panel[j];
      const uint8_t* panel = w.packed + size_t(local) * panel_bytes;
      const int64_t o0 = local * kPackedPanelRows;
      const int valid = static_cast<int>(std::min<int64_t>(kPackedPanelRows, w.out - o0));
      float* y = targets[j].y + o0;
      const int64_t ldy = targets[j].ldy;
      switch (rows) {
        case 1:
          Kernel::template panel<1>(panel, nb, act, y, ldy, valid);
          break;
        case 2:
          Kernel::template panel<2>(panel, nb, act, y, ldy, valid);
          break;
        case 3:
          Kernel::template panel<3>(panel, nb, act, y, ldy, valid);
          break;
        default:
          Kernel::template panel<4>(panel, nb, act, y, ldy, valid);
          break;
      }
    }
  };
  hand_out_panels(pool, first_panel[count], decode_panel_step(rows, Kernel::kStreams), run_chunk);
}

template <class Fmt, GemvPrefetch kPf, int kStreamCount>
struct LegacyOrQ4KGemv {
  static constexpr int kStreams = kStreamCount;
  static constexpr int kOffset = Fmt::kOffset;
  static constexpr bool kSplitScales = false;
  static constexpr bool kActivationsQ8K = Fmt::kActivationsQ8K;
  template <int R>
  static void panel(const uint8_t* pn, int64_t nb, const PackedActivations& act, float* y, int64_t ldy, int valid) {
    packed_gemv_panel<Fmt, R, kPf>(pn, nb, act, y, ldy, valid);
  }
  template <int S>
  static void panels(const uint8_t* const* pn, int64_t nb, const PackedActivations& act, float* const* y,
                     const int* valid) {
    packed_gemv_panels<S>(pn, nb, y, valid, [&](const uint8_t* panel, int64_t b, __m512* f0, __m512* f1) {
      gemv_prefetch<kPf>(Fmt::block(panel, b), Fmt::kBlockBytes);
      packed_gemv_block<Fmt, 1>(panel, b, nb, act, f0, f1);
    });
  }
};
template <class K, GemvPrefetch kPf, int kStreamCount>
struct PlanesGemv {
  static constexpr int kStreams = kStreamCount;
  static constexpr int kOffset = K::Dec::kOffset;
  static constexpr bool kSplitScales = K::Dec::kSplitScales;
  static constexpr bool kActivationsQ8K = K::Dec::kActivationsQ8K;
  template <int R>
  static void panel(const uint8_t* pn, int64_t nb, const PackedActivations& act, float* y, int64_t ldy, int valid) {
    packed_planes_gemv_panel<K, R, kPf>(pn, nb, act, y, ldy, valid);
  }
  template <int S>
  static void panels(const uint8_t* const* pn, int64_t nb, const PackedActivations& act, float* const* y,
                     const int* valid) {
    packed_gemv_panels<S>(pn, nb, y, valid, [&](const uint8_t* panel, int64_t b, __m512* f0, __m512* f1) {
      const uint8_t* super;
      gemv_prefetch<kPf>(planes_block<K>(panel, b, &super), K::kBlockBytes + 64);
      packed_planes_gemv_block<K, 1>(panel, b, nb, act, f0, f1);
    });
  }
};

// kPf for Q8_0, Q4_0 and Q6_K, kQ4K5KPf for Q4_K and Q5_K (the two differ on AMD: matmul.cpp, at
// gemv_prefetch_amd); with one activation row, up to kStreams panels at a time (packed_gemv_panels).
template <GemvPrefetch kPf, GemvPrefetch kQ4K5KPf, int kStreams>
void packed_gemv_of_type(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                         ThreadPool* pool) {
  switch (targets[0].w.type) {
    case GgmlType::Q8_0:
      return packed_gemv_run<LegacyOrQ4KGemv<PackedQ8_0, kPf, kStreams>>(targets, count, x, rows, ldx, pool);
    case GgmlType::Q4_0:
      return packed_gemv_run<LegacyOrQ4KGemv<PackedQ4_0, kPf, kStreams>>(targets, count, x, rows, ldx, pool);
    case GgmlType::Q4_K:
      return packed_gemv_run<LegacyOrQ4KGemv<PackedQ4_K, kQ4K5KPf, kStreams>>(targets, count, x, rows, ldx,
                                                                              pool);
    case GgmlType::Q5_K:
      return packed_gemv_run<PlanesGemv<PlanesQ5_K, kQ4K5KPf, kStreams>>(targets, count, x, rows, ldx, pool);
    case GgmlType::Q6_K:
      return packed_gemv_run<PlanesGemv<PlanesQ6_K, kPf, kStreams>>(targets, count, x, rows, ldx, pool);
    default:
      throw std::logic_error(std::string("packed_gemv_avx512: no packed kernel for ") +
                             ggml_type_name(targets[0].w.type));
  }
}

// ------------------------------------------------------------------------------------------------
// F32 weights, packed (per element k a panel's 32 rows as two 64-byte vectors), few activation rows:
// the FMA chains of the GGUF-layout kernel (f32_stream_group in matmul_avx512.cpp: per output one
// chain over k in order from +0, so the same bits), read front to back with no transposition. That
// kernel transposes 16 x 16 blocks of the rows it streams, and on decode the shuffles, not memory,
// were its limit: E2B's F32 per-layer-input projections ran at 25-31 GB/s against 50-68 for the
// token's Q4_0 products (Zen 5 VM, `gem4 bench --products`).

// Block b (32 elements of k) of a panel against R activation rows x (element 0 of the block).
template <int R>
inline void packed_f32_block(const float* blk, const float* x, int64_t ldx, __m512* f0, __m512* f1) {
#pragma GCC unroll 8
  for (int k = 0; k < kQK; ++k) {
    const __m512 w0 = _mm512_load_ps(blk + kPackedPanelRows * k);
    const __m512 w1 = _mm512_load_ps(blk + kPackedPanelRows * k + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[r * ldx + k]);
      f0[r] = _mm512_fmadd_ps(w0, xv, f0[r]);
      f1[r] = _mm512_fmadd_ps(w1, xv, f1[r]);
    }
  }
}

template <int R, GemvPrefetch kPf>
void packed_f32_panel(const uint8_t* panel, int64_t nb, const float* x, int64_t ldx, float* y, int64_t ldy,
                      int valid) {
  __m512 f0[R], f1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) f0[r] = f1[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = panel + size_t(b) * kPackedF32BlockBytes;
    gemv_prefetch<kPf>(blk, kPackedF32BlockBytes);
    packed_f32_block<R>(reinterpret_cast<const float*>(blk), x + b * kQK, ldx, f0, f1);
  }
  for (int r = 0; r < R; ++r) store_panel_sums(y + r * ldy, valid, f0[r], f1[r]);
}

// packed_f32_panel<rows> (1 <= rows <= kPackedF32MaxRows).
template <GemvPrefetch kPf, int R = 1>
void packed_f32_panel_rows(int64_t rows, const uint8_t* panel, int64_t nb, const float* x, int64_t ldx,
                           float* y, int64_t ldy, int valid) {
  if constexpr (R < kPackedF32MaxRows) {
    if (rows > R) return packed_f32_panel_rows<kPf, R + 1>(rows, panel, nb, x, ldx, y, ldy, valid);
  }
  packed_f32_panel<R, kPf>(panel, nb, x, ldx, y, ldy, valid);
}

// The panels handed out as the int8 GEMVs hand theirs out; with one activation row kStreams at a time.
template <GemvPrefetch kPf, int kStreams>
void packed_f32_gemv_with(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y,
                          int64_t ldy, ThreadPool* pool) {
  const int64_t nb = w.in / kQK;
  const auto step = [&](const uint8_t* panel, int64_t b, __m512* f0, __m512* f1) {
    const uint8_t* blk = panel + size_t(b) * kPackedF32BlockBytes;
    gemv_prefetch<kPf>(blk, kPackedF32BlockBytes);
    packed_f32_block<1>(reinterpret_cast<const float*>(blk), x + b * kQK, ldx, f0, f1);
  };
  hand_out_matrix_panels<kStreams>(
      w, y, ldy, size_t(nb) * kPackedF32BlockBytes, rows, pool,
      [&](int n, const uint8_t* const* pn, float* const* ys, const int* valid) {
        if (n == 8) packed_gemv_panels<8>(pn, nb, ys, valid, step);
        if (n == 4) packed_gemv_panels<4>(pn, nb, ys, valid, step);
        if (n == 2) packed_gemv_panels<2>(pn, nb, ys, valid, step);
      },
      [&](const uint8_t* panel, float* out, int valid) {
        packed_f32_panel_rows<kPf>(rows, panel, nb, x, ldx, out, ldy, valid);
      });
}

}  // namespace

void panel_from_packed_avx512(const MatrixView& w, int64_t p, int64_t nb, uint8_t* panel) {
  switch (w.type) {
    case GgmlType::Q8_0:
      return panel_from_packed_legacy<DecodeQ8_0>(w, p, nb, panel);
    case GgmlType::Q4_0:
      return panel_from_packed_legacy<DecodeQ4_0>(w, p, nb, panel);
    case GgmlType::Q4_K:
      return panel_from_packed_legacy<DecodeQ4_K>(w, p, nb, panel);
    case GgmlType::Q5_K:
      return panel_from_packed_planes<PlanesQ5_K>(w, p, nb, panel);
    case GgmlType::Q6_K:
      return panel_from_packed_planes<PlanesQ6_K>(w, p, nb, panel);
    default:
      throw std::logic_error(std::string("panel_from_packed_avx512: no packed layout for ") + ggml_type_name(w.type));
  }
}

void packed_gemv_shared_avx512(const MatmulTarget* targets, int count, const float* x, int64_t rows,
                               int64_t ldx, ThreadPool* pool) {
  if (gemv_prefetch_amd())
    return packed_gemv_of_type<kPrefetchPageHeads, kPrefetchL1NonTemporal, 1>(targets, count, x, rows, ldx,
                                                                              pool);
  packed_gemv_of_type<kPrefetchL1, kPrefetchL1, kIntelStreams>(targets, count, x, rows, ldx, pool);
}

void packed_f32_gemv_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y,
                            int64_t ldy, ThreadPool* pool) {
  if (gemv_prefetch_amd()) return packed_f32_gemv_with<kPrefetchPageHeads, 1>(w, x, rows, ldx, y, ldy, pool);
  packed_f32_gemv_with<kPrefetchL1, kIntelStreams>(w, x, rows, ldx, y, ldy, pool);
}

void packed_gemv_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                        ThreadPool* pool) {
  const MatmulTarget target{w, y, ldy};
  packed_gemv_shared_avx512(&target, 1, x, rows, ldx, pool);
}

}  // namespace gem4::matmul_detail
