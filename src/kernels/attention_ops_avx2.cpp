// AVX2 + FMA + F16C weighted sums of value rows (F32, F16, BF16 or Q8_0; see attention_ops.h), for the
// Avx2 and AvxVnni sets; the 256-bit counterpart of attention_ops_avx512.cpp. A tile of up to 4 output rows
// (query heads of one KV group share their value rows) x 16 columns stays in registers while the keys stream
// by. Register budget (16 ymm): 4 rows x 2 vectors = 8 accumulators, 2 value vectors, 1 broadcast weight, 1
// temporary for the BF16 widening or the Q8_0 scale: 12. Eight independent accumulators cover the FMA latency
// (4 cycles x 2 ports on Haswell through Alder Lake); per key 2 value loads + 4 broadcasts feed 8 FMAs, so
// the loads (2 a cycle) keep up. Gemma's 8 heads per KV group make two full tiles; 6 rows would fit (15
// registers) but split 8 heads unevenly.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "gguf/ggml_types.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4 {

namespace {

// 8 elements of a row from column c on as f32 (exact), and one element (for columns past the last 8):
// F32, F16 and BF16 rows, and Q8_0 rows (c a multiple of 8, so the 8 sit in one block; the int8 values
// times the block's scale, a product exact in f32).
struct LoadF32 {
  static __m256 load(const void* row, int64_t c) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + c);
  }
  static float one(const void* row, int64_t c) { return static_cast<const float*>(row)[c]; }
  static const char* ptr(const void* row, int64_t c) {
    return reinterpret_cast<const char*>(static_cast<const float*>(row) + c);
  }
};
struct LoadF16 {
  static __m256 load(const void* row, int64_t c) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + c)));
  }
  static float one(const void* row, int64_t c) { return fp16_to_fp32(static_cast<const uint16_t*>(row)[c]); }
  static const char* ptr(const void* row, int64_t c) {
    return reinterpret_cast<const char*>(static_cast<const uint16_t*>(row) + c);
  }
};
struct LoadBF16 {
  static __m256 load(const void* row, int64_t c) {
    const auto* p = static_cast<const uint16_t*>(row) + c;
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
  static float one(const void* row, int64_t c) { return bf16_to_fp32(static_cast<const uint16_t*>(row)[c]); }
  static const char* ptr(const void* row, int64_t c) {
    return reinterpret_cast<const char*>(static_cast<const uint16_t*>(row) + c);
  }
};
struct LoadQ8_0 {
  static __m256 load(const void* row, int64_t c) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[uint64_t(c) / kQK];
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + uint64_t(c) % kQK));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(_cvtsh_ss(b.d)));
  }
  static float one(const void* row, int64_t c) {
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[uint64_t(c) / kQK];
    return fp16_to_fp32(b.d) * float(b.qs[uint64_t(c) % kQK]);
  }
  static const char* ptr(const void* row, int64_t c) {
    return reinterpret_cast<const char*>(static_cast<const BlockQ8_0*>(row) + uint64_t(c) / kQK);
  }
};

constexpr int64_t kValueAhead = 8;

// H rows x 8 * NV columns starting at column d0: per output, one FMA per key in order of j from +0.
template <class L, int H, int NV>
void value_tile(const float* p, int64_t ldp, const void* const* v, int64_t v_col, int64_t nk, int d0,
                float* out, int64_t ldo, bool accumulate) {
  __m256 acc[H][NV];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < NV; ++c)
      acc[h][c] = accumulate ? _mm256_loadu_ps(out + h * ldo + d0 + 8 * c) : _mm256_setzero_ps();
  for (int64_t j = 0; j < nk; ++j) {
    if (j + kValueAhead < nk) {  // see attention_ops_avx512.cpp
      _mm_prefetch(L::ptr(v[j + kValueAhead], v_col + d0), _MM_HINT_T0);
      _mm_prefetch(L::ptr(v[j + kValueAhead], v_col + d0 + 8 * NV - 1), _MM_HINT_T0);
    }
    __m256 vv[NV];
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) vv[c] = L::load(v[j], v_col + d0 + 8 * c);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m256 w = _mm256_broadcast_ss(p + h * ldp + j);
      for (int c = 0; c < NV; ++c) acc[h][c] = _mm256_fmadd_ps(w, vv[c], acc[h][c]);
    }
  }
#pragma GCC unroll 4  // a rolled loop over acc keeps it on the stack (see attention_ops_avx512.cpp)
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 2
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(out + h * ldo + d0 + 8 * c, acc[h][c]);
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
      value_tile_any<L, 2>(hn, ph, ldp, v, v_col, nk, d0, oh, ldo, accumulate);
    if (d0 + 8 <= width) {
      value_tile_any<L, 1>(hn, ph, ldp, v, v_col, nk, d0, oh, ldo, accumulate);
      d0 += 8;
    }
    // The last < 8 columns (head widths are multiples of 16, so only odd test shapes get here): the
    // same FMAs one element at a time.
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

void weighted_value_sum_avx2(const float* p, int64_t ldp, int n_rows, GgmlType type, const void* const* v,
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
