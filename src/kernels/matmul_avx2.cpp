// GGUF-layout matrix products of the 256-bit kernel sets (AVX2 + FMA + F16C; AVX-VNNI uses them too):
// what int8_ymm.inc (the packed-layout int8 kernels) does not take, i.e. Q4_1/Q5_0/Q5_1, the F32/F16/BF16
// family, and every type when packed reading is off (bench --repack 0).
//  * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: activations quantized like llama.cpp (q8_0 / q8_1); block dot products
//    with llama.cpp's sign trick (|w| as unsigned times sign(w)*x, vpmaddubsw then vpmaddwd), which
//    cannot saturate the 16-bit pair sums: |w| <= 128, |x| <= 127. Weight rows are processed in tiles of
//    16 that stay in L1/L2 while every group of activation rows passes over them, so each weight byte is
//    fetched from memory once per call and decoded once per activation group.
//  * F32, F16, BF16, Q4_K, Q5_K, Q6_K: weights converted to f32, FMA products (see "F32 family" below).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/gemv_prefetch_x86.h"
#include "kernels/gemv_streams.h"
#include "kernels/matmul_internal.h"
#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4::matmul_detail {
namespace {

constexpr int kWeightTile = 16;  // weight rows kept hot while activation groups pass over them

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

float round_to_half(float f) { return _cvtsh_ss(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

const uint8_t* row_ptr(const MatrixView& w, int64_t o) {
  return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(o) * w.row_bytes;
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// ------------------------------------------------------------------------------------------------
// Activation quantization: llama.cpp's x86 quantize_row_q8_0 / q8_1 (see matmul_avx512.cpp).

struct QuantizedBlock {
  float d, s;
};

QuantizedBlock quantize_block(const float* x, int8_t* q) {
  __m256 v[4];
  __m256 amax_v = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax_v = _mm256_max_ps(amax_v, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax_v), _mm256_extractf128_ps(amax_v, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float d = amax / 127.f;
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
  __m256i i[4];
  for (int k = 0; k < 4; ++k) {
    i[k] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
  // Pack 32 int32 to bytes; the lane-wise packs interleave 4-element groups, the permute restores order.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
  return {round_to_half(d), round_to_half(d * static_cast<float>(sum))};
}

// ------------------------------------------------------------------------------------------------
// Weight decoders: the 32 weights of a block as signed bytes (u - offset), its scale and min.

__m256i low_high_nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
}

// Bit i of the 32-bit word at qh becomes 16 in byte i: broadcast the word, give byte i a copy of byte
// i/8, set every bit but bit i%8, and compare with all ones.
__m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i with_others = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  const __m256i set = _mm256_cmpeq_epi8(with_others, _mm256_set1_epi64x(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

struct DecodeQ8_0 {
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static __m256i weights(const uint8_t* b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  }
  static float scale(const uint8_t* b) { return half_at(b); }
  static float min(const uint8_t*) { return 0.0f; }
};

struct DecodeQ4_0 {
  static constexpr size_t kBytes = sizeof(BlockQ4_0);
  static constexpr bool kHasMin = false;
  static __m256i weights(const uint8_t* b) {
    return _mm256_sub_epi8(low_high_nibbles(b + 2), _mm256_set1_epi8(8));
  }
  static float scale(const uint8_t* b) { return half_at(b); }
  static float min(const uint8_t*) { return 0.0f; }
};

struct DecodeQ4_1 {
  static constexpr size_t kBytes = sizeof(BlockQ4_1);
  static constexpr bool kHasMin = true;
  static __m256i weights(const uint8_t* b) { return low_high_nibbles(b + 4); }
  static float scale(const uint8_t* b) { return half_at(b); }
  static float min(const uint8_t* b) { return half_at(b + 2); }
};

struct DecodeQ5_0 {
  static constexpr size_t kBytes = sizeof(BlockQ5_0);
  static constexpr bool kHasMin = false;
  static __m256i weights(const uint8_t* b) {
    return _mm256_sub_epi8(_mm256_or_si256(low_high_nibbles(b + 6), fifth_bits(b + 2)), _mm256_set1_epi8(16));
  }
  static float scale(const uint8_t* b) { return half_at(b); }
  static float min(const uint8_t*) { return 0.0f; }
};

struct DecodeQ5_1 {
  static constexpr size_t kBytes = sizeof(BlockQ5_1);
  static constexpr bool kHasMin = true;
  static __m256i weights(const uint8_t* b) {
    return _mm256_or_si256(low_high_nibbles(b + 8), fifth_bits(b + 4));
  }
  static float scale(const uint8_t* b) { return half_at(b); }
  static float min(const uint8_t* b) { return half_at(b + 2); }
};

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
    default:
      throw std::logic_error("with_int8_decoder: not an 8-bit-activation type");
  }
}

// Row-major quantized activations: q[r][nb][32], d[r][nb], s[r][nb].
struct Activations {
  int8_t* q;
  float* d;
  float* s;
  int64_t nb;
};

// Weight rows [o0, o1) against activation rows [r0, r0 + R): each block is decoded once and used R times.
template <class Dec, int R>
void int8_rows(const MatrixView& w, int64_t o0, int64_t o1, const Activations& act, int64_t r0, float* y,
               int64_t ldy) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t nb = act.nb;
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = row_ptr(w, o);
    __m256 acc[R];
    float mins[R];
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_setzero_ps();
      mins[r] = 0.0f;
    }
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * Dec::kBytes;
      const __m256i wq = Dec::weights(blk);
      const __m256i aw = _mm256_sign_epi8(wq, wq);
      const float dw = Dec::scale(blk);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int64_t m = (r0 + r) * nb + b;
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.q + m * kQK));
        const __m256i pairs = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, wq));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * act.d[m]), dot, acc[r]);
        if constexpr (Dec::kHasMin) mins[r] += Dec::min(blk) * act.s[m];
      }
    }
    for (int r = 0; r < R; ++r) y[(r0 + r) * ldy + o] = hsum(acc[r]) + mins[r];
  }
}

template <class Dec>
void int8_matmul(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool) {
  const int64_t nb = w.in / kQK;
  const size_t n_blocks = static_cast<size_t>(rows * nb);
  auto* buf = static_cast<uint8_t*>(thread_scratch(kSlotActivations, n_blocks * (kQK + 8)));
  Activations act{reinterpret_cast<int8_t*>(buf), reinterpret_cast<float*>(buf + n_blocks * kQK), nullptr,
                  nb};
  act.s = act.d + n_blocks;
  parallel_for(pool, rows, 8, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const QuantizedBlock qb = quantize_block(x + r * ldx + b * kQK, act.q + (r * nb + b) * kQK);
        act.d[r * nb + b] = qb.d;
        act.s[r * nb + b] = qb.s;
      }
    }
  });
  parallel_for(pool, w.out, kWeightTile, [&](int64_t o0, int64_t o1, int) {
    for (int64_t ot = o0; ot < o1; ot += kWeightTile) {
      const int64_t ote = std::min(o1, ot + kWeightTile);
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        switch (std::min<int64_t>(4, rows - r0)) {
          case 1:
            int8_rows<Dec, 1>(w, ot, ote, act, r0, y, ldy);
            break;
          case 2:
            int8_rows<Dec, 2>(w, ot, ote, act, r0, y, ldy);
            break;
          case 3:
            int8_rows<Dec, 3>(w, ot, ote, act, r0, y, ldy);
            break;
          default:
            int8_rows<Dec, 4>(w, ot, ote, act, r0, y, ldy);
            break;
        }
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------
// F32 family. Row dequantizers compute the same products as the scalar reference.

// y = d * level - m with both operations rounded, as the reference does (no FMA contraction here).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
void store_levels(__m256i levels, float d, float m, float* y) {
  const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
  for (int i = 0; i < 4; ++i) {
    const __m128i part = i < 2 ? _mm256_castsi256_si128(levels) : _mm256_extracti128_si256(levels, 1);
    const __m128i bytes = (i % 2) ? _mm_srli_si128(part, 8) : part;
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
    _mm256_storeu_ps(y + 8 * i, _mm256_sub_ps(_mm256_mul_ps(vd, f), vm));
  }
}
#pragma GCC pop_options

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin);
    for (int c = 0; c < 4; ++c, y += 64) {
      uint8_t sc1, m1, sc2, m2;
      k_quant_scale_min(2 * c, b[i].scales, &sc1, &m1);
      k_quant_scale_min(2 * c + 1, b[i].scales, &sc2, &m2);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      store_levels(_mm256_and_si256(q, low), d * sc1, dmin * m1, y);
      store_levels(_mm256_and_si256(_mm256_srli_epi16(q, 4), low), d * sc2, dmin * m2, y + 32);
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  const __m256i low = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(16);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh));
    for (int c = 0; c < 4; ++c, y += 64) {
      uint8_t sc1, m1, sc2, m2;
      k_quant_scale_min(2 * c, b[i].scales, &sc1, &m1);
      k_quant_scale_min(2 * c + 1, b[i].scales, &sc2, &m2);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      const __m256i bit1 = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
      const __m256i bit2 = _mm256_set1_epi8(static_cast<char>(2 << (2 * c)));
      const __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit1), bit1), sixteen);
      const __m256i h2 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit2), bit2), sixteen);
      store_levels(_mm256_or_si256(_mm256_and_si256(q, low), h1), d * sc1, dmin * m1, y);
      store_levels(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low), h2), d * sc2, dmin * m2,
                   y + 32);
    }
  }
}

void store_q6(__m256i q, float scale_a, float scale_b, float* y) {
  for (int i = 0; i < 4; ++i) {
    const __m128i part = i < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
    const __m128i bytes = (i % 2) ? _mm_srli_si128(part, 8) : part;
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
    _mm256_storeu_ps(y + 8 * i, _mm256_mul_ps(_mm256_set1_ps(i < 2 ? scale_a : scale_b), f));
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  const __m256i low = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = _cvtsh_ss(b[i].d);
    for (int half = 0; half < 2; ++half, y += 128) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * half));
      const int8_t* sc = b[i].scales + 8 * half;
      const __m256i q1 =
          _mm256_or_si256(_mm256_and_si256(l0, low), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45));
      const __m256i q2 =
          _mm256_or_si256(_mm256_and_si256(l1, low), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
      const __m256i q3 =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low), _mm256_and_si256(h, bits45));
      const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low),
                                         _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45));
      store_q6(_mm256_sub_epi8(q1, bias), d * sc[0], d * sc[1], y);
      store_q6(_mm256_sub_epi8(q2, bias), d * sc[2], d * sc[3], y + 32);
      store_q6(_mm256_sub_epi8(q3, bias), d * sc[4], d * sc[5], y + 64);
      store_q6(_mm256_sub_epi8(q4, bias), d * sc[6], d * sc[7], y + 96);
    }
  }
}

// Rows of F16 or BF16 weights as f32, 8 elements at a time (exact conversions), for the decode stream
// (StreamF32 beside it takes F32 rows) and dequant_row_f32; `partial` reads len < 8 elements (the other
// lanes zero) for the last columns of odd widths.
template <bool kBf16>
struct StreamHalf {
  using T = uint16_t;
  static __m256 widen(__m128i h) {
    if constexpr (kBf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
  static __m256 load(const uint16_t* p) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m256 partial(const uint16_t* p, int len) {
    alignas(16) uint16_t t[8] = {};
    std::memcpy(t, p, sizeof(uint16_t) * size_t(len));
    return widen(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
  }
};
using StreamF16 = StreamHalf<false>;
using StreamBF16 = StreamHalf<true>;

void dequant_row_f32(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  switch (t) {
    case GgmlType::F16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, StreamF16::load(h + i));
      for (; i < n; ++i) dst[i] = _cvtsh_ss(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, StreamBF16::load(h + i));
      for (; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case GgmlType::Q4_K:
      return dequant_q4_k(reinterpret_cast<const BlockQ4_K*>(src), dst, n / kQKK);
    case GgmlType::Q5_K:
      return dequant_q5_k(reinterpret_cast<const BlockQ5_K*>(src), dst, n / kQKK);
    case GgmlType::Q6_K:
      return dequant_q6_k(reinterpret_cast<const BlockQ6_K*>(src), dst, n / kQKK);
    default:
      return dequantize_row(t, src, dst, n);
  }
}

// ------------------------------------------------------------------------------------------------
// F32 family (F32, F16, BF16, and the K-quants when packed reading is off): weights converted to f32,
// every (activation row, output) one FMA chain over k in order from +0, one output per f32 lane: the
// arithmetic of the AVX-512 set's F32 kernels, so a row's result depends neither on the rows sharing
// the call nor on the kernel, and F32/F16 weights give the AVX-512 set's bits.
//  * Many rows: a GEMM on a transposed panel of 16 weight rows ([in][16] floats, built once per task)
//    and activation rows packed in groups of 6 ([in][6]). Micro-tile 16 x 6: 12 accumulators + 2 panel
//    vectors + 1 broadcast of the 16 ymm registers, 12 FMAs per 2 panel loads and 6 broadcasts. (Dot
//    products of 4 weight rows with 2 activation rows, 8 lanes of k each, loaded 6 vectors per 8 FMAs
//    and streamed both operands from L2/L3: E2B's prompt spent 9 % of its time there.)
//  * Up to kF32StreamMaxRows rows (decode): 8 weight rows streamed at a time (F32/F16/BF16 read where
//    they lie), 8 x 8 blocks converted and transposed in registers, then one FMA per k and activation
//    row. Up to 8, not 4: decode's attention scores are 8 query heads against each F16 key (E2B/E4B),
//    and through the GEMM every 16 keys were first converted into a buffer and transposed into a panel.
//    E2B Q4_0 decode at 4096 positions, `avx2`, tokens alternated: 0.944 of the time.

constexpr int kF32PanelRows = 16, kF32TileRows = 6, kF32StreamMaxRows = 8;

// Rows i of r[] become columns: afterwards r[i] lane j holds element i of row j.
inline void transpose_8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Lanes [0, n) set: the masked loads and stores of a partial 8-wide vector.
inline __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// `n_rows` rows of f32 from row o0 on (rows past `count` repeat the last one: computed, never
// stored): F32 rows point into the matrix, the other types are converted into `buf` first.
void f32_rows(const MatrixView& w, int64_t o0, int count, int n_rows, float* buf, const float** src) {
  for (int j = 0; j < n_rows; ++j) {
    const int64_t o = o0 + std::min(j, count - 1);
    if (w.type == GgmlType::F32) {
      src[j] = reinterpret_cast<const float*>(row_ptr(w, o));
    } else if (j < count) {
      dequant_row_f32(w.type, row_ptr(w, o), buf + j * w.in, w.in);
      src[j] = buf + j * w.in;
    } else {
      src[j] = src[count - 1];
    }
  }
}

// Columns [k0, k0 + len) (len <= 8) of rows src[0..7], transposed: t[i] lane j = src[j][k0 + i]; lanes
// beyond len read nothing.
inline void load_columns(const float* const* src, int64_t k0, int len, __m256 t[8]) {
  if (len == 8) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) t[j] = _mm256_loadu_ps(src[j] + k0);
  } else {
    const __m256i m = lane_mask(len);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) t[j] = _mm256_maskload_ps(src[j] + k0, m);
  }
  transpose_8x8(t);
}

// Panel of 16 weight rows as [in][16] floats. A packed F32 matrix (packed_matrix.h) holds it as one
// half of its 32-row panel: copied, with no transposition.
void build_f32_panel(const MatrixView& w, int64_t o0, int count, float* panel, float* rowbuf) {
  const int64_t n = w.in;
  if (w.packed && w.type == GgmlType::F32) {
    const float* half = reinterpret_cast<const float*>(w.packed) +
                        o0 / kPackedPanelRows * n * kPackedPanelRows + o0 % kPackedPanelRows;
    for (int64_t k = 0; k < n; ++k) {
      _mm256_store_ps(panel + k * kF32PanelRows, _mm256_load_ps(half + k * kPackedPanelRows));
      _mm256_store_ps(panel + k * kF32PanelRows + 8, _mm256_load_ps(half + k * kPackedPanelRows + 8));
    }
    return;
  }
  const float* src[kF32PanelRows];
  f32_rows(w, o0, count, kF32PanelRows, rowbuf, src);
  for (int h = 0; h < 2; ++h) {
    for (int64_t k0 = 0; k0 < n; k0 += 8) {
      const int len = static_cast<int>(std::min<int64_t>(8, n - k0));
      __m256 t[8];
      load_columns(src + 8 * h, k0, len, t);
      for (int i = 0; i < len; ++i) _mm256_store_ps(panel + (k0 + i) * kF32PanelRows + 8 * h, t[i]);
    }
  }
}

inline void store_outputs(float* y, __m256 v, int valid) {
  if (valid >= 8) {
    _mm256_storeu_ps(y, v);
  } else if (valid > 0) {
    _mm256_maskstore_ps(y, lane_mask(valid), v);
  }
}

template <int N>
void f32_tile(const float* panel, const float* xp, int64_t n, float* y, int64_t ldy, int valid) {
  __m256 c0[N], c1[N];
#pragma GCC unroll 6
  for (int i = 0; i < N; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < n; ++k) {
    const __m256 w0 = _mm256_load_ps(panel + k * kF32PanelRows);
    const __m256 w1 = _mm256_load_ps(panel + k * kF32PanelRows + 8);
#pragma GCC unroll 6
    for (int i = 0; i < N; ++i) {
      const __m256 xv = _mm256_broadcast_ss(xp + k * N + i);
      c0[i] = _mm256_fmadd_ps(w0, xv, c0[i]);
      c1[i] = _mm256_fmadd_ps(w1, xv, c1[i]);
    }
  }
#pragma GCC unroll 6  // rolled, the loop would keep c0/c1 on the stack inside the k loop too
  for (int i = 0; i < N; ++i) {
    store_outputs(y + i * ldy, c0[i], valid);
    store_outputs(y + i * ldy + 8, c1[i], valid - 8);
  }
}

void f32_tile_any(int rows, const float* panel, const float* xp, int64_t n, float* y, int64_t ldy,
                  int valid) {
  switch (rows) {
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

void f32_gemm(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
              ThreadPool* pool) {
  const int64_t n = w.in;
  const float* xp = pack_row_groups(x, rows, ldx, n, kF32TileRows, pool);
  // Tasks: panels x row chunks; rows are split only when there are too few panels for the threads.
  const int threads = pool ? pool->size() : 1;
  const int64_t n_panels = (w.out + kF32PanelRows - 1) / kF32PanelRows;
  const int64_t chunks = (threads > 1 && n_panels < 8 * threads) ? threads : 1;
  const int64_t chunk_rows = ((rows + chunks - 1) / chunks + kF32TileRows - 1) / kF32TileRows * kF32TileRows;
  auto run = [&](int64_t t0, int64_t t1, int) {
    auto* panel = static_cast<float*>(thread_scratch(kSlotPanel, sizeof(float) * n * kF32PanelRows));
    auto* rowbuf = static_cast<float*>(thread_scratch(kSlotRows, sizeof(float) * n * kF32PanelRows));
    int64_t built = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / chunks, c = t % chunks;
      const int64_t o0 = p * kF32PanelRows;
      const int count = static_cast<int>(std::min<int64_t>(kF32PanelRows, w.out - o0));
      if (p != built) {
        build_f32_panel(w, o0, count, panel, rowbuf);
        built = p;
      }
      const int64_t r_end = std::min(rows, (c + 1) * chunk_rows);
      for (int64_t r = c * chunk_rows; r < r_end; r += kF32TileRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kF32TileRows, r_end - r));
        f32_tile_any(nr, panel, xp + r * n, n, y + r * ldy + o0, ldy, count);
      }
    }
  };
  if (pool) {
    pool->parallel_for_dynamic(n_panels * chunks, 1, run);  // one task at a time
  } else {
    run(0, n_panels * chunks, 0);
  }
}

// F32 rows, as the stream loaders above.
struct StreamF32 {
  using T = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static __m256 partial(const float* p, int len) { return _mm256_maskload_ps(p, lane_mask(len)); }
};

// R activation rows against 8 weight rows streamed from src: per 8 x 8 block, loaded (converted to f32
// in registers) and transposed, one FMA per k and row, k in order (the tile's arithmetic). With 8 rows
// the 8 accumulators and 8 transposed vectors fill the 16 ymm registers, so GCC keeps a broadcast or
// two on the stack; that still beats the GEMM, whose panel of 16 keys is converted, transposed and
// stored first (decode's attention scores: 8 query heads against each F16 key).
template <class L, int R>
void f32_stream_group(const typename L::T* const* src, int64_t n, bool prefetch_next, size_t next,
                      const float* x, int64_t ldx, float* y, int64_t ldy, int valid) {
  __m256 c[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) c[r] = _mm256_setzero_ps();
  constexpr int kLineElems = 64 / sizeof(typename L::T);
  for (int64_t k0 = 0; k0 < n; k0 += 8) {
    const int len = static_cast<int>(std::min<int64_t>(8, n - k0));
    // Eight rows streamed at once are more than the hardware prefetchers follow well: each row 128
    // elements ahead into L1, and the next group's rows into L2 (as the AVX-512 set's kernel does).
    if (k0 % kLineElems == 0) {  // once per 64-byte line of each row
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(src[j] + k0 + 128), _MM_HINT_T0);
        if (prefetch_next) _mm_prefetch(reinterpret_cast<const char*>(src[j] + k0) + next, _MM_HINT_T1);
      }
    }
    __m256 t[8];
    if (len == 8) {
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) t[j] = L::load(src[j] + k0);
    } else {
      for (int j = 0; j < 8; ++j) t[j] = L::partial(src[j] + k0, len);
    }
    transpose_8x8(t);
    if (len == 8) {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          c[r] = _mm256_fmadd_ps(t[i], _mm256_broadcast_ss(x + r * ldx + k0 + i), c[r]);
      }
    } else {
      for (int i = 0; i < len; ++i) {
        for (int r = 0; r < R; ++r)
          c[r] = _mm256_fmadd_ps(t[i], _mm256_broadcast_ss(x + r * ldx + k0 + i), c[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) store_outputs(y + r * ldy, c[r], valid);
}

// f32_stream_group<L, rows> (1 <= rows <= kF32StreamMaxRows).
template <class L, int R = 1>
void f32_stream_rows(int64_t rows, const typename L::T* const* src, int64_t n, bool prefetch_next,
                     size_t next, const float* x, int64_t ldx, float* y, int64_t ldy, int valid) {
  if constexpr (R < kF32StreamMaxRows) {
    if (rows > R) return f32_stream_rows<L, R + 1>(rows, src, n, prefetch_next, next, x, ldx, y, ldy, valid);
  }
  f32_stream_group<L, R>(src, n, prefetch_next, next, x, ldx, y, ldy, valid);
}

// F32, F16 and BF16 rows are read where they lie; the other types (K-quants with packed reading off)
// are converted into a buffer of 8 f32 rows first.
void f32_stream(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                ThreadPool* pool) {
  const int64_t n = w.in;
  const bool direct = w.type == GgmlType::F32 || w.type == GgmlType::F16 || w.type == GgmlType::BF16;
  parallel_for_guided(pool, (w.out + 7) / 8, 2, [&](int64_t g0, int64_t g1, int) {
    auto* buf = direct ? nullptr : static_cast<float*>(thread_scratch(kSlotRows, sizeof(float) * 8 * n));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o0 = 8 * g;
      const int count = static_cast<int>(std::min<int64_t>(8, w.out - o0));
      const bool prefetch_next = o0 + 16 <= w.out;  // rows read in place: the next group's into L2
      const size_t next = 8 * w.row_bytes;
      const auto run = [&]<class L>(L) {
        const typename L::T* src[8];  // rows past `count` repeat the last one (computed, never stored)
        for (int j = 0; j < 8; ++j)
          src[j] = reinterpret_cast<const typename L::T*>(row_ptr(w, o0 + std::min(j, count - 1)));
        f32_stream_rows<L>(rows, src, n, prefetch_next, next, x, ldx, y + o0, ldy, count);
      };
      if (w.type == GgmlType::F16) {
        run(StreamF16{});
      } else if (w.type == GgmlType::BF16) {
        run(StreamBF16{});
      } else if (w.type == GgmlType::F32) {
        run(StreamF32{});
      } else {
        const float* src[8];  // converted rows, in cache already: nothing to prefetch
        f32_rows(w, o0, count, 8, buf, src);
        f32_stream_rows<StreamF32>(rows, src, n, false, next, x, ldx, y + o0, ldy, count);
      }
    }
  });
}

// F32 weights, packed (packed_matrix.h: per element k a panel's 32 rows, read as four ymm of 8 rows),
// up to kPackedF32Rows activation rows: f32_stream_group's FMA chains (the same bits) on weights read in
// order, with no transposition. 4 x R sums, 4 weight vectors and a broadcast fit the 16 registers for
// R <= 2; more rows take the row kernel above.
constexpr int kPackedF32Rows = 2;

template <int S, int R>
inline void packed_f32_block(const float* const* blk, const float* x, int64_t ldx, __m256 (*f)[R][4]) {
#pragma GCC unroll 4
  for (int k = 0; k < kQK; ++k) {
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
      __m256 wv[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) wv[v] = _mm256_load_ps(blk[s] + kPackedPanelRows * k + 8 * v);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(x + r * ldx + k);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) f[s][r][v] = _mm256_fmadd_ps(wv[v], xv, f[s][r][v]);
      }
    }
  }
}

// S panels (S <= 2 with one row) against R activation rows, block by block.
template <int S, int R, GemvPrefetch kPf>
void packed_f32_panels(const uint8_t* const* panel, int64_t nb, const float* x, int64_t ldx, float* const* y,
                       int64_t ldy, const int* valid) {
  __m256 f[S][R][4];
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) f[s][r][v] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const float* blk[S];
    for (int s = 0; s < S; ++s) {
      const uint8_t* p = panel[s] + size_t(b) * kPackedF32BlockBytes;
      gemv_prefetch<kPf>(p, kPackedF32BlockBytes);
      blk[s] = reinterpret_cast<const float*>(p);
    }
    packed_f32_block<S, R>(blk, x + b * kQK, ldx, f);
  }
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) store_outputs(y[s] + r * ldy + 8 * v, f[s][r][v], valid[s] - 8 * v);
}

// The panels handed out as the int8 GEMVs hand theirs out; with one row kStreams (1 or 2) at a time.
template <GemvPrefetch kPf, int kStreams>
void packed_f32_gemv_with(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y,
                          int64_t ldy, ThreadPool* pool) {
  const int64_t nb = w.in / kQK;
  hand_out_matrix_panels<kStreams>(
      w, y, ldy, size_t(nb) * kPackedF32BlockBytes, rows, pool,
      [&](int, const uint8_t* const* pn, float* const* ys, const int* valid) {
        packed_f32_panels<2, 1, kPf>(pn, nb, x, ldx, ys, ldy, valid);
      },
      [&](const uint8_t* panel, float* out, int valid) {
        if (rows == 1) {
          packed_f32_panels<1, 1, kPf>(&panel, nb, x, ldx, &out, ldy, &valid);
        } else {
          packed_f32_panels<1, 2, kPf>(&panel, nb, x, ldx, &out, ldy, &valid);
        }
      });
}

// Prefetch and streams as the int8 GEMVs' Q8_0 (int8_ymm.inc, gemv): page heads and one stream on AMD;
// on Intel the L1 prefetch and two streams (the 16 registers hold two panels' sums, not eight).
void packed_f32_gemv(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                     ThreadPool* pool) {
  if (gemv_prefetch_amd()) return packed_f32_gemv_with<kPrefetchPageHeads, 1>(w, x, rows, ldx, y, ldy, pool);
  packed_f32_gemv_with<kPrefetchL1, 2>(w, x, rows, ldx, y, ldy, pool);
}

void f32_matmul(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                ThreadPool* pool) {
  if (w.packed && w.type == GgmlType::F32 && rows <= kPackedF32Rows)
    return packed_f32_gemv(w, x, rows, ldx, y, ldy, pool);
  if (rows <= kF32StreamMaxRows) return f32_stream(w, x, rows, ldx, y, ldy, pool);
  f32_gemm(w, x, rows, ldx, y, ldy, pool);
}

}  // namespace

void matmul_avx2(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool) {
  if (is_int8_type(w.type)) {
    with_int8_decoder(w.type, [&](auto dec) { int8_matmul<decltype(dec)>(w, x, rows, ldx, y, ldy, pool); });
  } else {
    f32_matmul(w, x, rows, ldx, y, ldy, pool);
  }
}

}  // namespace gem4::matmul_detail
