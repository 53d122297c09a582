// Internal to the AVX-512 int8 kernels: AVX-512 quantization of activation blocks and decoding of weight blocks
// for the 8-bit kernels. Include only from files compiled with the AVX-512 flags (every function here is
// inline and those files share one set of flags, so the copies the linker merges are identical).
//
// Every weight type is seen as 32-element blocks of unsigned levels u with a scale, and for some a min:
//   weight = scale * (u - kOffset) + min
// Q4_K/Q5_K fit exactly (a 6-bit scale and min per 32 elements); Q6_K has a scale per 16 elements
// (kSplitScales: one for each half of a block).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/blocks.h"

namespace gem4::matmul_detail::avx512 {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

inline float round_to_half(float f) { return _cvtsh_ss(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ------------------------------------------------------------------------------------------------
// Activations, exactly as llama.cpp's x86 quantize_row_q8_0 / q8_1: d = amax / 127 (stored as fp16),
// q = round-half-even(x * (127 / amax)) (the inverse of the unrounded d), s = fp16(d * sum q).

struct QuantizedBlock {
  float d;     // scale: fp16-rounded here; the super-block's f32 d from quantize_superblock
  int sum;     // sum of the 32 quants
  int sum_hi;  // sum of the last 16
  float s;     // d * sum: fp16-rounded here; f32 from quantize_superblock
};

inline QuantizedBlock quantize_block(const float* x, int8_t* q) {
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / 127.f;
  const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
  constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512i i0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, id), kRne);
  const __m512i i1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, id), kRne);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(i0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(i1));
  const int sum_hi = _mm512_reduce_add_epi32(i1);
  const int sum = _mm512_reduce_add_epi32(i0) + sum_hi;
  return {round_to_half(d), sum, sum_hi, round_to_half(d * static_cast<float>(sum))};
}

// Reduces 16 vectors at once: lane b of the result is op over the 16 lanes of v[b]. A transpose in
// three rounds (128-bit halves, 128-bit lanes, then within lanes) with op applied after each round:
// 31 shuffles and 15 ops for 16 reductions, where one _mm512_reduce_* costs ~8 dependent steps.
// op must be associative and commutative and exact (max, integer add): the order differs from a
// sequential reduction.
template <class Op>
inline __m512 transpose_reduce16(const __m512 v[16], Op op) {
  __m512 r[8];  // r[i]: 128-bit lanes 0-1 partials of v[2i], lanes 2-3 of v[2i + 1]
  for (int i = 0; i < 8; ++i) {
    r[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  }
  __m512 q[4];  // q[i]: 128-bit lane k holds 4 partials of v[4i + k]
  for (int i = 0; i < 4; ++i) {
    q[i] = op(_mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0x88), _mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0xDD));
  }
  // Within each 128-bit lane: a 4 x 4 transpose of q[0..3] with op folded in.
  const __m512 u01 = op(_mm512_unpacklo_ps(q[0], q[1]), _mm512_unpackhi_ps(q[0], q[1]));
  const __m512 u23 = op(_mm512_unpacklo_ps(q[2], q[3]), _mm512_unpackhi_ps(q[2], q[3]));
  const __m512 t = op(_mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane 4k + j of t holds v[4j + k]; undo that 4 x 4 transpose.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, t);
}

// Sixteen consecutive blocks (512 values): exactly quantize_block's results for each, with the
// per-block horizontal max and sums done by transpose_reduce16. The prefill GEMM quantizes its whole
// input with this (a per-block quantize_block took ~8 % of the GEMM's time).
struct alignas(64) QuantizedBlocks16 {
  float d[16];
  int32_t sum[16];
  int32_t sum_hi[16];
  float s[16];
};

// q of block b goes to q + b * q_stride.
inline void quantize_blocks16(const float* x, int8_t* q, size_t q_stride, QuantizedBlocks16* out) {
  __m512 v[16];
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int b = 0; b < 16; ++b) {
    v[b] = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(x + 32 * b), sign),
                         _mm512_and_ps(_mm512_loadu_ps(x + 32 * b + 16), sign));
  }
  const __m512 amax = transpose_reduce16(v, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); });
  const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.f));
  const __mmask16 nonzero = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_OQ);
  alignas(64) float id[16];
  _mm512_store_ps(id, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(127.f), amax));
  constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m512 total[16], upper[16];  // per block: the quants' int32 sums per lane (as float bits)
  for (int b = 0; b < 16; ++b) {
    const __m512 idb = _mm512_set1_ps(id[b]);
    const __m512i i0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b), idb), kRne);
    const __m512i i1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b + 16), idb), kRne);
    int8_t* qb = q + b * q_stride;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtsepi32_epi8(i1));
    total[b] = _mm512_castsi512_ps(_mm512_add_epi32(i0, i1));
    upper[b] = _mm512_castsi512_ps(i1);
  }
  const auto add = [](__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  };
  const __m512i sum = _mm512_castps_si512(transpose_reduce16(total, add));
  _mm512_store_si512(out->sum, sum);
  _mm512_store_si512(out->sum_hi, _mm512_castps_si512(transpose_reduce16(upper, add)));
  const auto to_half = [](__m512 f) { return _mm512_cvtph_ps(_mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT)); };
  _mm512_store_ps(out->d, to_half(d));
  _mm512_store_ps(out->s, to_half(_mm512_mul_ps(d, _mm512_cvtepi32_ps(sum))));
}

// Activations of the K-quants (Q4_K, Q5_K, Q6_K) as llama.cpp's quantize_row_q8_K_ref quantizes them,
// the format its K-quant dot products take (Q8_K): one f32 scale per 256 values, iscale = -127 / max
// with max the first value of largest magnitude, q = min(127, round-half-even(iscale * x)), d = 1 /
// iscale. The sign of that scale is free: with the other sign every q and d is negated exactly (the
// rounding is symmetric and |q| <= 127), so every product the kernels form, and the sums and s below,
// come out bit for bit the same. So this takes iscale = 127 / amax and skips looking for the extreme
// value's sign. Per 32-value block b this gives what the kernels read: d itself (no fp16 rounding), the
// sums of q, and s = d * sum q in f32 (llama.cpp multiplies integer sums of q with the weights' mins,
// so nothing there is rounded to fp16 either). Against the per-32 fp16 scales of quantize_block,
// K-quant perplexity on a random-weight E2B Q4_K_M file moved from 4.2 % to 2.5 % off llama.cpp's.
// q of block b goes to q + b * q_stride.
inline void quantize_superblock(const float* x, int8_t* q, size_t q_stride, QuantizedBlock out[8]) {
  __m512 v[16];
  __m512 amax_v = _mm512_setzero_ps();
  for (int i = 0; i < 16; ++i) {
    v[i] = _mm512_loadu_ps(x + 16 * i);
    amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(v[i]));
  }
  const float amax = _mm512_reduce_max_ps(amax_v);
  if (!(amax > 0.0f)) {  // all zero
    for (int b = 0; b < 8; ++b) {
      std::memset(q + b * q_stride, 0, kQK);
      out[b] = {0.0f, 0, 0, 0.0f};
    }
    return;
  }
  const float iscale = 127.f / amax;
  const float d = 1.0f / iscale;
  const __m512 is = _mm512_set1_ps(iscale);
  constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m512 halves[16];  // int32 quants per lane of each 16-value half (as float bits), for one reduction
  for (int i = 0; i < 16; ++i) {
    const __m512i qi = _mm512_min_epi32(_mm512_cvt_roundps_epi32(_mm512_mul_ps(v[i], is), kRne),
                                        _mm512_set1_epi32(127));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + (i / 2) * q_stride + 16 * (i % 2)), _mm512_cvtsepi32_epi8(qi));
    halves[i] = _mm512_castsi512_ps(qi);
  }
  const auto add = [](__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  };
  alignas(64) int32_t half_sums[16];
  _mm512_store_si512(half_sums, _mm512_castps_si512(transpose_reduce16(halves, add)));
  for (int b = 0; b < 8; ++b) {
    const int sum = half_sums[2 * b] + half_sums[2 * b + 1];
    out[b] = {d, sum, half_sums[2 * b + 1], d * static_cast<float>(sum)};
  }
}

// The nb blocks of one activation row, quantized as weights of the kind `kQ8K` says take them (K-quants:
// quantize_superblock; nb is then a multiple of 8) or else per block as quantize_block (16 blocks at a
// time where it can). q of block b goes to q + b * q_stride; store(b, QuantizedBlock) takes the rest.
template <bool kQ8K, class Store>
inline void quantize_row_blocks(const float* x, int64_t nb, int8_t* q, size_t q_stride, Store&& store) {
  if constexpr (kQ8K) {
    QuantizedBlock qb[8];
    for (int64_t b = 0; b < nb; b += 8) {
      quantize_superblock(x + b * kQK, q + b * q_stride, q_stride, qb);
      for (int i = 0; i < 8; ++i) store(b + i, qb[i]);
    }
  } else {
    int64_t b = 0;
    QuantizedBlocks16 q16;
    for (; b + 16 <= nb; b += 16) {
      quantize_blocks16(x + b * kQK, q + b * q_stride, q_stride, &q16);
      for (int i = 0; i < 16; ++i) store(b + i, QuantizedBlock{q16.d[i], q16.sum[i], q16.sum_hi[i], q16.s[i]});
    }
    for (; b < nb; ++b) store(b, quantize_block(x + b * kQK, q + b * q_stride));
  }
}

// ------------------------------------------------------------------------------------------------
// Bit unpacking helpers.

// Legacy 4-bit layout: byte j holds element j (low nibble) and j + 16 (high nibble).
inline __m256i legacy_nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
}

// Two blocks' nibbles in element order: both 16-byte arrays in one ymm, shifted and unshifted copies
// fill a zmm, one lane shuffle restores the order.
inline __m512i legacy_nibbles_pair(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i both =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)), 1);
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
  return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

// Bit i of the little-endian 32-bit word(s) becomes 16 in byte i.
inline __m256i fifth_bits(const uint8_t* qh) {
  return _mm256_maskz_mov_epi8(static_cast<__mmask32>(static_cast<uint32_t>(load_i32(qh))),
                               _mm256_set1_epi8(16));
}
inline __m512i fifth_bits_pair(const uint8_t* qh0, const uint8_t* qh1) {
  const uint64_t bits =
      static_cast<uint32_t>(load_i32(qh0)) | (uint64_t{static_cast<uint32_t>(load_i32(qh1))} << 32);
  return _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(16));
}

// The fp16 values at h0 and h1 in lanes 0-7 and 8-15.
inline __m512 half_pair(const uint8_t* h0, const uint8_t* h1) {
  uint16_t a, b;
  std::memcpy(&a, h0, sizeof a);
  std::memcpy(&b, h1, sizeof b);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a | (uint32_t{b} << 16))));
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

// Lane i of the result is lane first + i / per of v (per = 4 or 8 lanes per source value).
inline __m512 spread(__m512 v, int first, int per) {
  const __m512i idx = _mm512_add_epi32(
      _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                        per == 4 ? 2 : 3),
      _mm512_set1_epi32(first));
  return _mm512_permutexvar_ps(idx, v);
}

// ------------------------------------------------------------------------------------------------
// Decoders. Each provides:
//   kOffset, kHasMin, kSplitScales
//   quants(row, b)                 the 32 levels of block b (element order), for repacking
//   kGroupBlocks, group_scales     scales (per half with kSplitScales) and mins of the kGroupBlocks
//                                  blocks of group g, as f32
//   kPairsPerGroup, kGroupBytes, Group, group(row, g), pair(group, k, &u, &scale, &min)
//                                  blocks 2k, 2k+1 of a group in one zmm: levels, scale per lane, min
//                                  per half (lanes 0-7 first block, 8-15 second)

// The legacy formats: fp16 scale at byte 0, fp16 min at byte 2 (the "_1" types), then the 32 fifth bits
// (Q5) at QhAt, then the levels at QsAt: 16 nibble bytes, or 32 signed bytes for Q8_0.
template <size_t Bytes, int Offset, bool HasMin, int QhAt, int QsAt>
struct LegacyDecoder {
  static constexpr size_t kBytes = Bytes;
  static constexpr int kOffset = Offset;
  static constexpr bool kHasMin = HasMin, kSplitScales = false;
  static constexpr bool kActivationsQ8K = false;  // per-block activations, as llama.cpp's q8_0 / q8_1
  static constexpr int kGroupBlocks = 1, kPairsPerGroup = 1;
  static constexpr size_t kGroupBytes = 2 * Bytes;  // bytes of a row per stream group (a block pair)
  static constexpr bool kEightBit = Offset == 128;

  static __m256i quants(const uint8_t* row, int64_t b) {
    const uint8_t* blk = row + b * Bytes;
    if constexpr (kEightBit) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + QsAt));
      return _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));  // q + 128
    } else if constexpr (QhAt >= 0) {
      return _mm256_or_si256(legacy_nibbles(blk + QsAt), fifth_bits(blk + QhAt));
    } else {
      return legacy_nibbles(blk + QsAt);
    }
  }
  static void group_scales(const uint8_t* row, int64_t g, float* scale, float*, float* min) {
    scale[0] = half_at(row + g * Bytes);
    if constexpr (HasMin) min[0] = half_at(row + g * Bytes + 2);
  }

  struct Group {
    const uint8_t* b0;
  };
  static Group group(const uint8_t* row, int64_t g) { return {row + 2 * g * Bytes}; }
  static void pair(const Group& grp, int, __m512i* u, __m512* scale, __m512* min) {
    const uint8_t* b0 = grp.b0;
    const uint8_t* b1 = b0 + Bytes;
    if constexpr (kEightBit) {
      const __m512i q = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + QsAt))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + QsAt)), 1);
      *u = _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
    } else if constexpr (QhAt >= 0) {
      *u = _mm512_or_si512(legacy_nibbles_pair(b0 + QsAt, b1 + QsAt), fifth_bits_pair(b0 + QhAt, b1 + QhAt));
    } else {
      *u = legacy_nibbles_pair(b0 + QsAt, b1 + QsAt);
    }
    *scale = half_pair(b0, b1);
    if constexpr (HasMin) *min = half_pair(b0 + 2, b1 + 2);
  }
  // A lone last block (odd block counts): the pair format with the upper half zero.
  static void single(const uint8_t* row, int64_t b, __m512i* u, __m512* scale, __m512* min) {
    const uint8_t* blk = row + b * Bytes;
    *u = _mm512_zextsi256_si512(quants(row, b));
    *scale = _mm512_maskz_mov_ps(0x00FF, _mm512_set1_ps(half_at(blk)));
    if constexpr (HasMin) *min = _mm512_maskz_mov_ps(0x00FF, _mm512_set1_ps(half_at(blk + 2)));
  }
};

using DecodeQ8_0 = LegacyDecoder<sizeof(BlockQ8_0), 128, false, -1, 2>;
using DecodeQ4_0 = LegacyDecoder<sizeof(BlockQ4_0), 8, false, -1, 2>;
using DecodeQ4_1 = LegacyDecoder<sizeof(BlockQ4_1), 0, true, -1, 4>;
using DecodeQ5_0 = LegacyDecoder<sizeof(BlockQ5_0), 16, false, 2, 6>;
using DecodeQ5_1 = LegacyDecoder<sizeof(BlockQ5_1), 0, true, 4, 8>;

// Q4_K / Q5_K scales and mins of a super-block as f32: lanes 0-7 d * scale_j, lanes 8-15 -(dmin * min_j),
// the products the reference dequantization forms (y = d*scale*q - dmin*min).
inline __m512 k_scales_mins(const uint8_t* scales, const uint16_t& d_bits, const uint16_t& dmin_bits) {
  uint32_t w[3];
  std::memcpy(w, scales, 12);
  // Sub-blocks 0-3: low 6 bits of bytes 0-3 (scales) and 4-7 (mins). Sub-blocks 4-7: low (scales) and
  // high (mins) nibbles of bytes 8-11, with bits 4-5 taken from the top two bits of bytes 0-3 / 4-7.
  const uint32_t low6 = 0x3F3F3F3F, nibble = 0x0F0F0F0F, two = 0x03030303;
  alignas(16) uint32_t v[4];
  v[0] = w[0] & low6;
  v[1] = (w[2] & nibble) | (((w[0] >> 6) & two) << 4);
  v[2] = w[1] & low6;
  v[3] = ((w[2] >> 4) & nibble) | (((w[1] >> 6) & two) << 4);
  const __m512 f =
      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(v))));
  const __m512 mul =
      _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(_cvtsh_ss(d_bits)), _mm512_set1_ps(-_cvtsh_ss(dmin_bits)));
  return _mm512_mul_ps(f, mul);
}

// Q4_K (Bits5 = false) and Q5_K: block j of a super-block is chunk j/2 of 64 elements, low nibbles of
// qs[32c..] for even j, high nibbles for odd j; Q5_K adds bit j of qh[l] as 16.
template <class Block, bool Bits5>
struct KQuantDecoder {
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true, kSplitScales = false;
  static constexpr bool kActivationsQ8K = true;  // quantize_superblock
  static constexpr int kGroupBlocks = 8, kPairsPerGroup = 4;
  static constexpr size_t kGroupBytes = sizeof(Block);

  static __m256i quants(const uint8_t* row, int64_t b) {
    const Block* blk = reinterpret_cast<const Block*>(row) + b / 8;
    const int j = static_cast<int>(b % 8);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * (j / 2)));
    __m256i u = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
    if constexpr (Bits5) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh));
      const __mmask32 set = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << j)));
      u = _mm256_mask_add_epi8(u, set, u, _mm256_set1_epi8(16));
    }
    return u;
  }
  static void group_scales(const uint8_t* row, int64_t g, float* scale, float*, float* min) {
    const Block* blk = reinterpret_cast<const Block*>(row) + g;
    alignas(64) float f[16];
    _mm512_store_ps(f, k_scales_mins(blk->scales, blk->d, blk->dmin));
    for (int j = 0; j < 8; ++j) {
      scale[j] = f[j];
      min[j] = f[8 + j];
    }
  }

  struct Group {
    const Block* blk;
    __m512 scales_mins;
  };
  static Group group(const uint8_t* row, int64_t g) {
    const Block* blk = reinterpret_cast<const Block*>(row) + g;
    return {blk, k_scales_mins(blk->scales, blk->d, blk->dmin)};
  }
  static void pair(const Group& grp, int k, __m512i* u, __m512* scale, __m512* min) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp.blk->qs + 32 * k));
    *u = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1),
                          _mm512_set1_epi8(0x0F));
    if constexpr (Bits5) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp.blk->qh));
      const uint64_t lo = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * k))));
      const uint64_t hi = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(2 << (2 * k))));
      *u = _mm512_or_si512(*u, _mm512_maskz_mov_epi8(lo | (hi << 32), _mm512_set1_epi8(16)));
    }
    *scale = spread(grp.scales_mins, 2 * k, 8);
    *min = spread(grp.scales_mins, 8 + 2 * k, 8);
  }
};

using DecodeQ4_K = KQuantDecoder<BlockQ4_K, false>;
using DecodeQ5_K = KQuantDecoder<BlockQ5_K, true>;

// Q6_K: block j of a super-block is quarter q = j % 4 of half h = j / 4: low 4 bits from the low (q < 2)
// or high nibbles of ql[64h + 32(q % 2) + l], bits 4-5 from bits 2q, 2q+1 of qh[32h + l]; offset 32.
// Its 16 signed scales are one per 16 elements.
struct DecodeQ6_K {
  static constexpr int kOffset = 32;
  static constexpr bool kHasMin = false, kSplitScales = true;
  static constexpr bool kActivationsQ8K = true;  // quantize_superblock
  static constexpr int kGroupBlocks = 8, kPairsPerGroup = 4;
  static constexpr size_t kGroupBytes = sizeof(BlockQ6_K);

  static __m512 scales(const BlockQ6_K* blk) {  // d * scales[s], s = 0..15
    const __m512 sc = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales))));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(blk->d)), sc);
  }
  static __m256i quants(const uint8_t* row, int64_t b) {
    const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + b / 8;
    const int j = static_cast<int>(b % 8), h = j / 4, q = j % 4;
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->ql + 64 * h + 32 * (q % 2)));
    const __m256i low = _mm256_and_si256(q < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0F));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * h));
    const __m256i high = _mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * q)), 4);
    return _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
  }
  static void group_scales(const uint8_t* row, int64_t g, float* scale, float* scale_hi, float*) {
    alignas(64) float f[16];
    _mm512_store_ps(f, scales(reinterpret_cast<const BlockQ6_K*>(row) + g));
    for (int j = 0; j < 8; ++j) {
      scale[j] = f[2 * j];
      scale_hi[j] = f[2 * j + 1];
    }
  }

  struct Group {
    const BlockQ6_K* blk;
    __m512 scales;
  };
  static Group group(const uint8_t* row, int64_t g) {
    const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + g;
    return {blk, scales(blk)};
  }
  // Pair k holds quarters 0-1 (k even) or 2-3 (k odd) of half k / 2: the 64 bytes ql[64h ..] give the
  // low 4 bits (low or high nibbles), qh[32h ..] the top two, shifted per quarter.
  static void pair(const Group& grp, int k, __m512i* u, __m512* scale, __m512*) {
    const int h = k / 2;
    const __m512i l = _mm512_loadu_si512(grp.blk->ql + 64 * h);
    const __m512i low = _mm512_and_si512(k % 2 ? _mm512_srli_epi16(l, 4) : l, _mm512_set1_epi8(0x0F));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp.blk->qh + 32 * h));
    const __m512i high = k % 2 ? _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1)
                               : _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_slli_epi16(qh, 4)),
                                                    _mm256_slli_epi16(qh, 2), 1);
    *u = _mm512_or_si512(low, _mm512_and_si512(high, _mm512_set1_epi8(0x30)));
    *scale = spread(grp.scales, 4 * k, 4);
  }
};

}  // namespace gem4::matmul_detail::avx512
