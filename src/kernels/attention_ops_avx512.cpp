// AVX-512 weighted sums of value rows (F32, F16, BF16 or Q8_0; see attention_ops.h). Up to 8 output rows (the
// query heads of a KV group share their value rows) x 32 columns are held in 16 accumulators while the keys
// stream by: per key two loads of the value row (F16/BF16 converted in registers, exactly) and one broadcast
// per output row feed 16 FMAs, with no stores (the old row-by-row axpy stored every partial sum,
// which bound it to the store port, and needed the rows converted to f32 beforehand).
#include <immintrin.h>

#include <algorithm>

#include "gguf/ggml_types.h"
#include "kernels/load_f32_avx512.h"
#include "tensor/blocks.h"

namespace gem4 {

namespace {

// 16 elements of a value row from column c on, masked lanes reading zero and touching no memory: the
// F32/F16/BF16 loaders addressed by column, and Q8_0 rows (c a multiple of 16, so the 16 sit in one
// block: the int8 values times the block's scale, a product exact in f32).
template <class L>
struct Columns {
  static __m512 load(const void* row, int64_t c, __mmask16 m) {
    return L::load(static_cast<const typename L::T*>(row) + c, m);
  }
  // Where column c lies (for prefetching).
  static const char* ptr(const void* row, int64_t c) {
    return reinterpret_cast<const char*>(static_cast<const typename L::T*>(row) + c);
  }
};
struct ColumnsQ8_0 {
  static __m512 load(const void* row, int64_t c, __mmask16 m) {
    if (m == 0) return _mm512_setzero_ps();  // the block may lie past the row
    const BlockQ8_0& b = static_cast<const BlockQ8_0*>(row)[uint64_t(c) / kQK];
    const __m128i q = _mm_maskz_loadu_epi8(m, b.qs + uint64_t(c) % kQK);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(_cvtsh_ss(b.d)));
  }
  static const char* ptr(const void* row, int64_t c) {
    return reinterpret_cast<const char*>(static_cast<const BlockQ8_0*>(row) + uint64_t(c) / kQK);
  }
};
using LoadF32 = Columns<avx512_rows::LoadF32>;
using LoadF16 = Columns<avx512_rows::LoadF16>;
using LoadBF16 = Columns<avx512_rows::LoadBF16>;

constexpr int64_t kValueAhead = 8;

template <class L, int H>
void value_tile(const float* p, int64_t ldp, const void* const* v, int64_t v_col, int64_t nk, int d0, int n,
                float* out, int64_t ldo, bool accumulate) {
  const __mmask16 m0 = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  const __mmask16 m1 = n >= 32 ? __mmask16(0xFFFF) : n > 16 ? __mmask16((1u << (n - 16)) - 1) : __mmask16(0);
  __m512 a0[H], a1[H];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h) {
    a0[h] = accumulate ? _mm512_maskz_loadu_ps(m0, out + h * ldo + d0) : _mm512_setzero_ps();
    a1[h] = accumulate ? _mm512_maskz_loadu_ps(m1, out + h * ldo + d0 + 16) : _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < nk; ++j) {
    // The value rows lie a whole cache row apart (all KV heads), too far for the hardware prefetchers
    // to follow; decode reads them from memory, not cache. Fetching the key kValueAhead on (both lines
    // of an F32 tile) took 26B-A4B decode tokens ~1 % less time (tokens alternated, Zen 5).
    if (j + kValueAhead < nk) {
      _mm_prefetch(L::ptr(v[j + kValueAhead], v_col + d0), _MM_HINT_T0);
      _mm_prefetch(L::ptr(v[j + kValueAhead], v_col + d0 + 31), _MM_HINT_T0);
    }
    const __m512 v0 = L::load(v[j], v_col + d0, m0), v1 = L::load(v[j], v_col + d0 + 16, m1);
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      const __m512 w = _mm512_set1_ps(p[h * ldp + j]);
      a0[h] = _mm512_fmadd_ps(w, v0, a0[h]);
      a1[h] = _mm512_fmadd_ps(w, v1, a1[h]);
    }
  }
  // Unrolled like the loops above: a rolled loop indexing a0/a1 made GCC keep the arrays on the stack
  // and store all 16 accumulators on every key (in cache: 25-37 GMAC/s on one Zen 5 core).
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h) {
    _mm512_mask_storeu_ps(out + h * ldo + d0, m0, a0[h]);
    _mm512_mask_storeu_ps(out + h * ldo + d0 + 16, m1, a1[h]);
  }
}

// value_tile<L, hn> for 1 <= hn <= H.
template <class L, int H = 8>
void value_tile_any(int hn, const float* p, int64_t ldp, const void* const* v, int64_t v_col, int64_t nk,
                    int d0, int n, float* out, int64_t ldo, bool accumulate) {
  if constexpr (H == 1) {
    value_tile<L, 1>(p, ldp, v, v_col, nk, d0, n, out, ldo, accumulate);
  } else {
    if (hn == H) return value_tile<L, H>(p, ldp, v, v_col, nk, d0, n, out, ldo, accumulate);
    value_tile_any<L, H - 1>(hn, p, ldp, v, v_col, nk, d0, n, out, ldo, accumulate);
  }
}

template <class L>
void value_sum(const float* p, int64_t ldp, int n_rows, const void* const* v, int64_t v_col, int64_t nk,
               int width, float* out, int64_t ldo, bool accumulate) {
  for (int h0 = 0; h0 < n_rows; h0 += 8) {
    const int hn = std::min(8, n_rows - h0);
    const float* ph = p + h0 * ldp;
    float* oh = out + h0 * ldo;
    for (int d0 = 0; d0 < width; d0 += 32) {
      const int n = std::min(32, width - d0);
      value_tile_any<L>(hn, ph, ldp, v, v_col, nk, d0, n, oh, ldo, accumulate);
    }
  }
}

}  // namespace

void weighted_value_sum_avx512(const float* p, int64_t ldp, int n_rows, GgmlType type, const void* const* v,
                               int64_t v_col, int64_t nk, int width, float* out, int64_t ldo,
                               bool accumulate) {
  switch (type) {
    case GgmlType::F16:
      return value_sum<LoadF16>(p, ldp, n_rows, v, v_col, nk, width, out, ldo, accumulate);
    case GgmlType::BF16:
      return value_sum<LoadBF16>(p, ldp, n_rows, v, v_col, nk, width, out, ldo, accumulate);
    case GgmlType::Q8_0:
      return value_sum<ColumnsQ8_0>(p, ldp, n_rows, v, v_col, nk, width, out, ldo, accumulate);
    default:
      return value_sum<LoadF32>(p, ldp, n_rows, v, v_col, nk, width, out, ldo, accumulate);
  }
}

}  // namespace gem4
