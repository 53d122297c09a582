// Matrix-product kernels for AVX-512 (F/BW/VL/DQ + VNNI), the primary path (Zen 4).
//
// Two families:
//  * Quantized weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), "int8": activations quantized
//    to 8 bits per 32-element block like llama.cpp's q8_0/q8_1; integer dot products with vpdpbusd
//    (unsigned weight levels x signed activation bytes; the weight offset, e.g. 8 for Q4_0, is folded
//    into the accumulator's starting value). Block decoding is in block_decode_avx512.h.
//  * F32, F16, BF16: weights converted to f32, then an FMA kernel.
// Each family has a streaming kernel for few activation rows (decode: weights read once, straight from
// their blocks) and a register-blocked kernel for many rows (prefill: a panel of 32 weight rows is
// repacked once per call and reused for every activation row).
// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_*) as uninitialized at -O3.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/block_decode_avx512.h"
#include "kernels/matmul_internal.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4::matmul_detail {
namespace {

using namespace avx512;

const uint8_t* row_ptr(const MatrixView& w, int64_t o) {
  return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(o) * w.row_bytes;
}

// Masks selecting the first `valid` of 32 lanes split over two 16-lane registers.
__mmask16 lane_mask_lo(int valid) { return valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1); }
__mmask16 lane_mask_hi(int valid) { return lane_mask_lo(std::max(0, valid - 16)); }

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
// Int8 family, few activation rows: stream each weight row once, two blocks (one zmm) at a time.
// The lanes of one vpdpbusd hold partial sums of 4 elements each, so every lane can carry its own weight
// scale (Q6_K changes scale every 4 lanes) and its own offset correction; the horizontal sum comes last.

constexpr int kInt8StreamMaxRows = 4;

struct alignas(64) PairActivations {
  int8_t q[64];
  int32_t init[16];  // -offset * (sum of the lane's 4 quants): the weight offset's share of each lane
  float d[16];       // block 0's scale in lanes 0-7, block 1's in lanes 8-15
  float s[16];       // fp16(d * sum q) of each block in lanes 0 and 8 (types with a min)
};

void quantize_pairs(const float* x, int64_t rows, int64_t ldx, int64_t nb, int offset, PairActivations* out) {
  const int64_t np = (nb + 1) / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t p = 0; p < np; ++p) {
      PairActivations& pa = out[r * np + p];
      std::memset(&pa, 0, sizeof pa);  // also zeroes block 1 of an odd tail
      for (int half = 0; half < 2 && 2 * p + half < nb; ++half) {
        const QuantizedBlock qb = quantize_block(x + r * ldx + (2 * p + half) * kQK, pa.q + 32 * half);
        for (int i = 0; i < 8; ++i) pa.d[8 * half + i] = qb.d;
        pa.s[8 * half] = qb.s;
      }
      const __m512i lane_sums =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_load_si512(pa.q));
      _mm512_store_si512(pa.init, _mm512_mullo_epi32(lane_sums, _mm512_set1_epi32(-offset)));
    }
  }
}

// Weight rows [o0, o0 + G) against R activation rows. G independent rows give the out-of-order core
// G x R independent FMA chains and share each activation load G ways.
template <class Dec, int R, int G>
void int8_stream_group(const MatrixView& w, int64_t o0, const PairActivations* act, int64_t nb, float* y,
                       int64_t ldy) {
  const int64_t np = (nb + 1) / 2;
  const uint8_t* row[G];
  for (int g = 0; g < G; ++g) row[g] = row_ptr(w, o0 + g);
  __m512 sum[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) sum[g][r] = _mm512_setzero_ps();
  auto accumulate = [&](int64_t p, const __m512i* u, const __m512* dw, const __m512* mw) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const PairActivations& a = act[r * np + p];
      const __m512i init = _mm512_load_si512(a.init), q = _mm512_load_si512(a.q);
      const __m512 dx = _mm512_load_ps(a.d);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m512i acc = _mm512_dpbusd_epi32(init, u[g], q);
        // (d_w * d_x) * isum, llama.cpp's order.
        sum[g][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dw[g], dx), sum[g][r]);
        if constexpr (Dec::kHasMin) sum[g][r] = _mm512_fmadd_ps(mw[g], _mm512_load_ps(a.s), sum[g][r]);
      }
    }
  };
  __m512i u[G];
  __m512 dw[G], mw[G];
  const int64_t full_pairs = nb / 2;
  // Rows are short (1-2 KiB) and read G at a time, too briefly for the hardware prefetchers to ramp
  // up; fetching the next G rows at the same position keeps DRAM busy (about 2x on long matrices).
  const bool prefetch = o0 + 2 * G <= w.out;
  const size_t ahead = G * w.row_bytes;
  for (int64_t p0 = 0; p0 < full_pairs; p0 += Dec::kPairsPerGroup) {
    typename Dec::Group grp[G];
    const size_t pos = static_cast<size_t>(p0 / Dec::kPairsPerGroup) * Dec::kGroupBytes;
    for (int g = 0; g < G; ++g) {
      grp[g] = Dec::group(row[g], p0 / Dec::kPairsPerGroup);
      if (prefetch) {
        for (size_t off = 0; off < Dec::kGroupBytes; off += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(row[g] + ahead + pos + off), _MM_HINT_T0);
        }
      }
    }
#pragma GCC unroll 4
    for (int k = 0; k < Dec::kPairsPerGroup; ++k) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) Dec::pair(grp[g], k, &u[g], &dw[g], &mw[g]);
      accumulate(p0 + k, u, dw, mw);
    }
  }
  if constexpr (Dec::kGroupBlocks == 1) {
    if (nb % 2) {  // odd block count: the last block alone
      for (int g = 0; g < G; ++g) Dec::single(row[g], nb - 1, &u[g], &dw[g], &mw[g]);
      accumulate(full_pairs, u, dw, mw);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) y[r * ldy + o0 + g] = _mm512_reduce_add_ps(sum[g][r]);
}

template <class Dec, int R>
void int8_stream_rows(const MatrixView& w, int64_t o0, int64_t o1, const PairActivations* act, int64_t nb,
                      float* y, int64_t ldy) {
  constexpr int G = R == 1 ? 4 : 2;
  int64_t o = o0;
  for (; o + G <= o1; o += G) int8_stream_group<Dec, R, G>(w, o, act, nb, y, ldy);
  for (; o < o1; ++o) int8_stream_group<Dec, R, 1>(w, o, act, nb, y, ldy);
}

template <class Dec>
void int8_stream(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool) {
  const int64_t nb = w.in / kQK, np = (nb + 1) / 2;
  auto* act =
      static_cast<PairActivations*>(thread_scratch(kSlotActivations, sizeof(PairActivations) * rows * np));
  quantize_pairs(x, rows, ldx, nb, Dec::kOffset, act);
  parallel_for(pool, w.out, 16, [&](int64_t o0, int64_t o1, int) {
    switch (rows) {
      case 1:
        return int8_stream_rows<Dec, 1>(w, o0, o1, act, nb, y, ldy);
      case 2:
        return int8_stream_rows<Dec, 2>(w, o0, o1, act, nb, y, ldy);
      case 3:
        return int8_stream_rows<Dec, 3>(w, o0, o1, act, nb, y, ldy);
      default:
        return int8_stream_rows<Dec, 4>(w, o0, o1, act, nb, y, ldy);
    }
  });
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
// and is reused by every activation row; the quantized activations are stored block-major so the six
// rows of a tile are 192 contiguous bytes per block.

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

struct BlockMajorActivations {
  int8_t* q;         // [nb][rows][32]
  float* d;          // [nb][rows]
  int32_t* init;     // [nb][rows]: -offset * sum q (of the first 16 quants with split scales)
  int32_t* init_hi;  // [nb][rows]: -offset * sum of the last 16 quants (split scales only)
  float* s;          // [nb][rows]
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

template <class Dec, int N>
void int8_tile(const uint8_t* panel, int64_t nb, const BlockMajorActivations& act, int64_t rows, int64_t r0,
               float* y, int64_t ldy, int valid) {
  using L = PanelLayout<Dec>;
  __m512 f0[N], f1[N];
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) f0[n] = f1[n] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = panel + b * L::kBlockBytes;
    const int8_t* xb = act.q + (b * rows + r0) * kQK;
    const int64_t meta = b * rows + r0;
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
void int8_tile_any(int n, const uint8_t* panel, int64_t nb, const BlockMajorActivations& act, int64_t rows,
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
  const size_t q_bytes = static_cast<size_t>(rows * nb * kQK);
  const size_t meta = static_cast<size_t>(rows * nb);
  auto* buf = static_cast<uint8_t*>(thread_scratch(kSlotActivations, q_bytes + meta * 16));
  BlockMajorActivations act;
  act.q = reinterpret_cast<int8_t*>(buf);
  act.d = reinterpret_cast<float*>(buf + q_bytes);
  act.init = reinterpret_cast<int32_t*>(act.d + meta);
  act.init_hi = act.init + meta;
  act.s = reinterpret_cast<float*>(act.init_hi + meta);
  parallel_for(pool, rows, 8, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const QuantizedBlock qb = quantize_block(x + r * ldx + b * kQK, act.q + (b * rows + r) * kQK);
        const int64_t m = b * rows + r;
        act.d[m] = qb.d;
        act.s[m] = qb.s;
        act.init[m] = -Dec::kOffset * (Dec::kSplitScales ? qb.sum - qb.sum_hi : qb.sum);
        act.init_hi[m] = -Dec::kOffset * qb.sum_hi;
      }
    }
  });

  const TaskSplit split = split_tasks(w.out, rows, pool, kInt8TileRows);
  parallel_for(pool, split.n_panels * split.row_chunks, 1, [&](int64_t t0, int64_t t1, int) {
    auto* panel = static_cast<uint8_t*>(thread_scratch(kSlotPanel, nb * PanelLayout<Dec>::kBlockBytes));
    int64_t packed = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / split.row_chunks, c = t % split.row_chunks;
      const int64_t o0 = p * kPanelRows;
      const int count = static_cast<int>(std::min<int64_t>(kPanelRows, w.out - o0));
      if (p != packed) {
        repack_int8_panel<Dec>(w, o0, count, nb, panel);
        packed = p;
      }
      const int64_t r_end = std::min(rows, (c + 1) * split.chunk_rows);
      for (int64_t r = c * split.chunk_rows; r < r_end; r += kInt8TileRows) {
        const int n = static_cast<int>(std::min<int64_t>(kInt8TileRows, r_end - r));
        int8_tile_any<Dec>(n, panel, nb, act, rows, r, y + r * ldy + o0, ldy, count);
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

// Loaders of 16 weights as f32, full or masked (tail).
struct LoadF32 {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const float* p, __mmask16 k) { return _mm512_maskz_loadu_ps(k, p); }
};
struct LoadF16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load(const uint16_t* p, __mmask16 k) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
  }
};
struct LoadBF16 {
  using T = uint16_t;
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const uint16_t* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load(const uint16_t* p, __mmask16 k) { return widen(_mm256_maskz_loadu_epi16(k, p)); }
};

// F32 family, few activation rows: 4 weight rows x R activation rows of dot products, 16 elements per
// step. 4R independent accumulators hide the FMA latency even for R = 1.
// `ahead` (bytes, 0 for none): prefetch that far past each weight row, i.e. the next rows to come.
template <class L, int R>
void dot_4xR(const typename L::T* const* wr, const float* x, int64_t ldx, int64_t n, size_t ahead,
             float* out) {
  __m512 acc[4][R];
  for (int j = 0; j < 4; ++j)
    for (int r = 0; r < R; ++r) acc[j][r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 wv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      if (ahead) _mm_prefetch(reinterpret_cast<const char*>(wr[j] + k) + ahead, _MM_HINT_T0);
      wv[j] = L::load(wr[j] + k);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * ldx + k);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[j][r] = _mm512_fmadd_ps(wv[j], xv, acc[j][r]);
    }
  }
  if (k < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1);
    __m512 wv[4];
    for (int j = 0; j < 4; ++j) wv[j] = L::load(wr[j] + k, m);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + r * ldx + k);
      for (int j = 0; j < 4; ++j) acc[j][r] = _mm512_fmadd_ps(wv[j], xv, acc[j][r]);
    }
  }
  for (int j = 0; j < 4; ++j)
    for (int r = 0; r < R; ++r) out[j * 4 + r] = _mm512_reduce_add_ps(acc[j][r]);
}

template <class L>
void dot_4xR_any(int r, const typename L::T* const* wr, const float* x, int64_t ldx, int64_t n, size_t ahead,
                 float* out) {
  switch (r) {
    case 1:
      return dot_4xR<L, 1>(wr, x, ldx, n, ahead, out);
    case 2:
      return dot_4xR<L, 2>(wr, x, ldx, n, ahead, out);
    case 3:
      return dot_4xR<L, 3>(wr, x, ldx, n, ahead, out);
    default:
      return dot_4xR<L, 4>(wr, x, ldx, n, ahead, out);
  }
}

// Up to this many activation rows the streaming kernel beats building transposed panels (measured on
// 1536 x 6144: about 8 rows for F32 weights, about 16 when the weights must be converted anyway).
constexpr int kF32StreamMaxRows = 8;
constexpr int kConvertedStreamMaxRows = 16;

// Weight rows are read in their own type (converted in registers), 4 at a time, and each group of 4 is
// reused by every group of 4 activation rows while it is in L1.
template <class L>
void f32_stream(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                ThreadPool* pool) {
  const int64_t n = w.in;
  parallel_for(pool, (w.out + 3) / 4, 4, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o = 4 * g;
      const int nw = static_cast<int>(std::min<int64_t>(4, w.out - o));
      const typename L::T* wr[4];
      for (int j = 0; j < 4; ++j) {
        // Past the last row, repeat row 0: computed, not stored.
        wr[j] = reinterpret_cast<const typename L::T*>(row_ptr(w, o + (j < nw ? j : 0)));
      }
      // While the first activation group passes, prefetch the next 4 weight rows (as in the int8 stream).
      const size_t ahead = o + 8 <= w.out ? 4 * w.row_bytes : 0;
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, rows - r0));
        float out[16];
        dot_4xR_any<L>(nr, wr, x + r0 * ldx, ldx, n, r0 == 0 ? ahead : 0, out);
        for (int j = 0; j < nw; ++j)
          for (int r = 0; r < nr; ++r) y[(r0 + r) * ldy + o + j] = out[j * 4 + r];
      }
    }
  });
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

// In-register transpose of a 16x16 block of floats (r[j] = row j): unpacks and in-lane shuffles transpose
// the 4x4 blocks, two rounds of 128-bit lane shuffles move the blocks into place.
void transpose_16x16(__m512 r[16]) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    // u[4i + c], 128-bit lane L: element 4L + c of rows 4i..4i+3.
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 p0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88),
                 p1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 q0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 q1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(p0, q0, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(p0, q0, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(p1, q1, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(p1, q1, 0xDD);
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

}  // namespace

void matmul_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                   ThreadPool* pool) {
  if (uses_int8_path(w.type)) {
    with_int8_decoder(w.type, [&](auto dec) {
      using Dec = decltype(dec);
      if (rows <= kInt8StreamMaxRows) {
        int8_stream<Dec>(w, x, rows, ldx, y, ldy, pool);
      } else {
        int8_gemm<Dec>(w, x, rows, ldx, y, ldy, pool);
      }
    });
    return;
  }
  if (rows > (w.type == GgmlType::F32 ? kF32StreamMaxRows : kConvertedStreamMaxRows)) {
    return f32_gemm(w, x, rows, ldx, y, ldy, pool);
  }
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
