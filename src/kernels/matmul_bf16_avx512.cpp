// BF16 weights on CPUs with AVX512_BF16: vdpbf16ps, two multiply-adds per f32 lane and instruction
// (twice the f32 FMA rate, half the bytes per weight).
//
// The activations are rounded to bf16 (round to nearest even) once per call, which is what llama.cpp
// does for BF16 weights; each output is then one f32 accumulation over k-pairs:
//   acc = dpbf16(acc, (w[2p], w[2p+1]), (x[2p], x[2p+1]))  for p = 0, 1, ... in order.
// Both kernels below perform exactly that chain per (activation row, output), one output per f32 lane,
// so results are batch invariant like every other matmul kernel (matmul.h). An odd `in` pads the last
// pair with a zero on both sides. Used where bf16_dot_active() (matmul.h): elsewhere BF16 weights take
// the f32 path of matmul_avx512.cpp, which converts them exactly and leaves the activations in f32.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/lanes_avx512.h"
#include "kernels/matmul_internal.h"
#include "kernels/thread_pool.h"

namespace gem4::matmul_detail {
namespace {

using avx512_lanes::lane_mask_hi;
using avx512_lanes::lane_mask_lo;
using avx512_lanes::transpose_16x16;

constexpr int kPanelRows = 32;
constexpr int kTileRows = 12;   // activation rows per GEMM micro-tile
constexpr int kStreamMaxRows = 4;

int64_t pairs_of(int64_t in) { return (in + 1) / 2; }

const uint16_t* weight_row(const MatrixView& w, int64_t o) {
  return reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w.data) + size_t(o) * w.row_bytes);
}

// Up to 16 k-pairs (32 bf16 weights) of a row, starting at pair p0: one dword per pair, missing
// elements zero.
__m512 load_pairs(const uint16_t* row, int64_t in, int64_t p0) {
  const int64_t len = std::min<int64_t>(32, in - 2 * p0);
  const __mmask32 m = len >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << len) - 1);
  return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, row + 2 * p0));
}

// One activation row to bf16 pairs: out[pairs_of(n)] dwords, (x[2p], x[2p+1]) in dword p.
void row_to_bf16_pairs(const float* x, int64_t n, uint32_t* out) {
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t len = std::min<int64_t>(32, n - i);
    const __m512 lo = _mm512_maskz_loadu_ps(lane_mask_lo(int(len)), x + i);
    const __m512 hi = _mm512_maskz_loadu_ps(lane_mask_hi(int(len)), x + i + 16);
    const __m512bh v = _mm512_cvtne2ps_pbh(hi, lo);  // lo in the low 16 bf16 values
    const int pairs = int((len + 1) / 2);
    _mm512_mask_storeu_epi32(out + i / 2, lane_mask_lo(pairs), reinterpret_cast<const __m512i&>(v));
  }
}

// ------------------------------------------------------------------------------------------------
// Many activation rows: a panel of 32 weight rows stored [pair][32] dwords (one zmm holds one k-pair of
// 16 rows), activations of 12 rows stored [pair][12] dwords, micro-tile 32 x 12: 24 accumulators,
// 2 panel loads and 12 broadcasts per 24 vdpbf16ps, as in the f32 tile. The panel (64 KiB per
// 1024 k-pairs) stays in L2 and serves every activation tile.

void build_panel(const MatrixView& w, int64_t o0, int count, uint32_t* panel) {
  const int64_t np = pairs_of(w.in);
  for (int h = 0; h < 2; ++h) {
    const uint16_t* src[16];
    for (int j = 0; j < 16; ++j) src[j] = weight_row(w, o0 + std::min(16 * h + j, count - 1));
    for (int64_t p0 = 0; p0 < np; p0 += 16) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) r[j] = load_pairs(src[j], w.in, p0);
      transpose_16x16(r);  // r[i] lane j: pair p0 + i of row j
      const int len = static_cast<int>(std::min<int64_t>(16, np - p0));
      for (int i = 0; i < len; ++i) _mm512_store_ps(reinterpret_cast<float*>(panel + (p0 + i) * kPanelRows + 16 * h), r[i]);
    }
  }
}

template <int N>
void bf16_tile(const uint32_t* panel, const uint32_t* xp, int64_t np, float* y, int64_t ldy, int valid) {
  __m512 c0[N], c1[N];
#pragma GCC unroll 12
  for (int i = 0; i < N; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < np; ++p) {
    const __m512i w0 = _mm512_load_si512(panel + p * kPanelRows);
    const __m512i w1 = _mm512_load_si512(panel + p * kPanelRows + 16);
#pragma GCC unroll 12
    for (int i = 0; i < N; ++i) {
      const __m512i xv = _mm512_set1_epi32(static_cast<int>(xp[p * N + i]));
      c0[i] = _mm512_dpbf16_ps(c0[i], reinterpret_cast<const __m512bh&>(w0), reinterpret_cast<const __m512bh&>(xv));
      c1[i] = _mm512_dpbf16_ps(c1[i], reinterpret_cast<const __m512bh&>(w1), reinterpret_cast<const __m512bh&>(xv));
    }
  }
  const __mmask16 k0 = lane_mask_lo(valid), k1 = lane_mask_hi(valid);
  for (int i = 0; i < N; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, k0, c0[i]);
    _mm512_mask_storeu_ps(y + i * ldy + 16, k1, c1[i]);
  }
}

template <int N = kTileRows>
void bf16_tile_any(int rows, const uint32_t* panel, const uint32_t* xp, int64_t np, float* y, int64_t ldy,
                   int valid) {
  if constexpr (N == 1) {
    bf16_tile<1>(panel, xp, np, y, ldy, valid);
  } else {
    if (rows == N) return bf16_tile<N>(panel, xp, np, y, ldy, valid);
    bf16_tile_any<N - 1>(rows, panel, xp, np, y, ldy, valid);
  }
}

void bf16_gemm(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
               ThreadPool* pool) {
  const int64_t np = pairs_of(w.in);
  const int64_t n_groups = (rows + kTileRows - 1) / kTileRows;
  auto* xp = static_cast<uint32_t*>(thread_scratch(kSlotActivations, sizeof(uint32_t) * (rows * np + 16)));
  parallel_for(pool, n_groups, 1, [&](int64_t g0, int64_t g1, int) {
    auto* row = static_cast<uint32_t*>(thread_scratch(kSlotRows, sizeof(uint32_t) * (np + 16)));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r0 = g * kTileRows;
      const int nr = static_cast<int>(std::min<int64_t>(kTileRows, rows - r0));
      uint32_t* dst = xp + r0 * np;
      for (int i = 0; i < nr; ++i) {
        row_to_bf16_pairs(x + (r0 + i) * ldx, w.in, row);
        for (int64_t p = 0; p < np; ++p) dst[p * nr + i] = row[p];
      }
    }
  });
  // Tasks are panels x activation-row chunks; the rows are split only when there are too few panels to
  // keep every thread busy (then a panel is built once per chunk).
  const int threads = pool ? pool->size() : 1;
  const int64_t n_panels = (w.out + kPanelRows - 1) / kPanelRows;
  const int64_t row_chunks = (threads > 1 && n_panels < 8 * threads) ? threads : 1;
  const int64_t chunk_rows = ((rows + row_chunks - 1) / row_chunks + kTileRows - 1) / kTileRows * kTileRows;
  parallel_for_dynamic(pool, n_panels * row_chunks, 1, [&](int64_t t0, int64_t t1, int) {
    auto* panel = static_cast<uint32_t*>(thread_scratch(kSlotPanel, sizeof(uint32_t) * np * kPanelRows));
    int64_t built = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / row_chunks, c = t % row_chunks;
      const int64_t o0 = p * kPanelRows;
      const int count = static_cast<int>(std::min<int64_t>(kPanelRows, w.out - o0));
      if (p != built) {
        build_panel(w, o0, count, panel);
        built = p;
      }
      const int64_t r_end = std::min(rows, (c + 1) * chunk_rows);
      for (int64_t r = c * chunk_rows; r < r_end; r += kTileRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kTileRows, r_end - r));
        bf16_tile_any(nr, panel, xp + r * np, np, y + r * ldy + o0, ldy, count);
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------
// Few activation rows (decode): 16 weight rows at a time, read once from their rows. 16 rows x 16 pairs
// are loaded and transposed in registers (one row per lane, as in the panel), then each pair is one
// vdpbf16ps per activation row with that row's pair broadcast: the tile's chain, bit for bit.

template <int R>
void bf16_stream_group(const MatrixView& w, int64_t o0, int count, const uint32_t* xpairs, int64_t np,
                       float* y, int64_t ldy) {
  const uint16_t* row[16];
  for (int j = 0; j < 16; ++j) row[j] = weight_row(w, o0 + std::min(j, count - 1));
  const bool prefetch = o0 + 32 <= w.out;
  const size_t ahead = 16 * w.row_bytes;
  __m512 c[R];
  for (int r = 0; r < R; ++r) c[r] = _mm512_setzero_ps();
  for (int64_t p0 = 0; p0 < np; p0 += 16) {
    __m512 t[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      // As in the f32 streaming kernel: this row 128 elements ahead into L1, the next group into L2.
      _mm_prefetch(reinterpret_cast<const char*>(row[j] + 2 * p0 + 128), _MM_HINT_T0);
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(row[j] + 2 * p0) + ahead, _MM_HINT_T1);
      t[j] = load_pairs(row[j], w.in, p0);
    }
    transpose_16x16(t);
    const int len = static_cast<int>(std::min<int64_t>(16, np - p0));
    for (int i = 0; i < len; ++i) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_set1_epi32(static_cast<int>(xpairs[r * np + p0 + i]));
        c[r] = _mm512_dpbf16_ps(c[r], reinterpret_cast<const __m512bh&>(t[i]), reinterpret_cast<const __m512bh&>(xv));
      }
    }
  }
  const __mmask16 k = lane_mask_lo(count);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * ldy + o0, k, c[r]);
}

void bf16_stream(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool) {
  const int64_t np = pairs_of(w.in);
  auto* xpairs = static_cast<uint32_t*>(thread_scratch(kSlotActivations, sizeof(uint32_t) * (rows * np + 16)));
  for (int64_t r = 0; r < rows; ++r) row_to_bf16_pairs(x + r * ldx, w.in, xpairs + r * np);
  parallel_for_guided(pool, (w.out + 15) / 16, 2, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o0 = 16 * g;
      const int count = static_cast<int>(std::min<int64_t>(16, w.out - o0));
      switch (rows) {
        case 1:
          bf16_stream_group<1>(w, o0, count, xpairs, np, y, ldy);
          break;
        case 2:
          bf16_stream_group<2>(w, o0, count, xpairs, np, y, ldy);
          break;
        case 3:
          bf16_stream_group<3>(w, o0, count, xpairs, np, y, ldy);
          break;
        default:
          bf16_stream_group<4>(w, o0, count, xpairs, np, y, ldy);
          break;
      }
    }
  });
}

}  // namespace

void matmul_bf16_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                        ThreadPool* pool) {
  if (rows <= kStreamMaxRows) return bf16_stream(w, x, rows, ldx, y, ldy, pool);
  bf16_gemm(w, x, rows, ldx, y, ldy, pool);
}

}  // namespace gem4::matmul_detail
