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
// repacked once per call and reused for every activation row). Weights packed at load time
// (packed_matrix.h) have their own streaming kernels and panel builders in matmul_packed_avx512.cpp.
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
#include "kernels/int8_panel_avx512.h"
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

constexpr int kInt8TileRows = 6;  // the panel layout (kPanelRows, PanelLayout): int8_panel_avx512.h

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
  size_t bytes;  // of all the arrays above
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
// activation rows are split as well. When the quantized activations outgrow L2 (the down projection:
// 512 rows x 6144 = 3 MiB) a task takes a group of panels and runs each row tile against all of them,
// so the activations stream from L3 once per group instead of once per panel; the group's panels
// (at most ~1 MiB) stay in L2.
struct TaskSplit {
  int64_t n_panels, row_chunks, chunk_rows;
  int64_t group;     // panels per task
  int64_t n_groups;  // tasks along the output dimension
};

// `all_panels`: the panels of every product sharing the call (matmul_shared_input), which decides
// whether there are enough to keep the threads busy without splitting rows.
TaskSplit split_tasks(int64_t out, int64_t rows, ThreadPool* pool, int tile_rows, int64_t all_panels = 0) {
  const int threads = pool ? pool->size() : 1;
  TaskSplit s;
  s.n_panels = (out + kPanelRows - 1) / kPanelRows;
  s.row_chunks = (threads > 1 && std::max(all_panels, s.n_panels) < 8 * threads) ? threads : 1;
  const int64_t per_chunk = (rows + s.row_chunks - 1) / s.row_chunks;
  s.chunk_rows = (per_chunk + tile_rows - 1) / tile_rows * tile_rows;
  s.group = 1;
  s.n_groups = s.n_panels;
  return s;
}

// Groups panels when `activation_bytes` outgrow half of L2 (see TaskSplit).
void group_panels_for_l2(TaskSplit& s, size_t activation_bytes, size_t panel_bytes, ThreadPool* pool) {
  constexpr size_t kL2Budget = size_t{1} << 20;  // half of a 2 MiB L2, for panels or for activations
  if (activation_bytes <= kL2Budget || s.row_chunks > 1) return;
  const int threads = pool ? pool->size() : 1;
  // Keep at least 4 tasks per thread so that dynamic hand-out still balances a noisy machine.
  const int64_t by_cache = std::max<int64_t>(1, int64_t(kL2Budget / panel_bytes));
  const int64_t by_balance = std::max<int64_t>(1, s.n_panels / (4 * threads));
  s.group = std::min<int64_t>({4, by_cache, by_balance});
  s.n_groups = (s.n_panels + s.group - 1) / s.group;
}

// Quantizes rows x in activations into the tile-major layout, in this thread's activation scratch.
template <class Dec>
TileMajorActivations quantize_tile_major(const float* x, int64_t rows, int64_t ldx, int64_t in, ThreadPool* pool) {
  const int64_t nb = in / kQK;
  const int64_t padded_rows = (rows + kInt8TileRows - 1) / kInt8TileRows * kInt8TileRows;
  const size_t q_bytes = static_cast<size_t>(padded_rows * nb * kQK);
  const size_t meta = static_cast<size_t>(padded_rows * nb);
  auto* buf = static_cast<uint8_t*>(thread_scratch(kSlotActivations, q_bytes + meta * 16));
  TileMajorActivations act;
  act.nb = nb;
  act.bytes = q_bytes + meta * 16;
  act.q = reinterpret_cast<int8_t*>(buf);
  act.d = reinterpret_cast<float*>(buf + q_bytes);
  act.init = reinterpret_cast<int32_t*>(act.d + meta);
  act.init_hi = act.init + meta;
  act.s = reinterpret_cast<float*>(act.init_hi + meta);
  parallel_for(pool, rows, 8, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t m0 = act.at(r, 0);  // blocks b, b + 1, ... of row r are kInt8TileRows entries apart
      quantize_row_blocks<Dec::kActivationsQ8K>(
          x + r * ldx, nb, act.q + m0 * kQK, kInt8TileRows * kQK, [&](int64_t b, const QuantizedBlock& qb) {
            const int64_t m = m0 + b * kInt8TileRows;
            act.d[m] = qb.d;
            act.s[m] = qb.s;
            act.init[m] = -Dec::kOffset * (Dec::kSplitScales ? qb.sum - qb.sum_hi : qb.sum);
            act.init_hi[m] = -Dec::kOffset * qb.sum_hi;
          });
    }
  });
  return act;
}

// The tiles of one or more products of the same quantized activations (the same type and `in`): each
// product's panels x row chunks are tasks, numbered product after product, handed out one at a time
// (on a shared machine a core that loses time to another process takes fewer panels instead of
// holding up the barrier; a task is a panel group x row chunk, ~0.1-0.5 ms).
template <class Dec>
void int8_gemm_tasks(const MatmulTarget* targets, int count, const TileMajorActivations& act, int64_t rows,
                     ThreadPool* pool) {
  const int64_t nb = act.nb;
  const size_t panel_bytes = nb * PanelLayout<Dec>::kBlockBytes;
  int64_t all_panels = 0;
  for (int j = 0; j < count; ++j) all_panels += (targets[j].w.out + kPanelRows - 1) / kPanelRows;
  TaskSplit split[kMaxSharedTargets];
  int64_t first_task[kMaxSharedTargets + 1] = {0};
  int64_t max_group = 1;
  for (int j = 0; j < count; ++j) {
    split[j] = split_tasks(targets[j].w.out, rows, pool, kInt8TileRows, all_panels);
    group_panels_for_l2(split[j], act.bytes, panel_bytes, pool);
    first_task[j + 1] = first_task[j] + split[j].n_groups * split[j].row_chunks;
    max_group = std::max(max_group, split[j].group);
  }
  auto run_tasks = [&](int64_t t0, int64_t t1, int) {
    auto* panels = static_cast<uint8_t*>(thread_scratch(kSlotPanel, max_group * panel_bytes));
    int built_target = -1;
    int64_t built = -1;  // the panel group of built_target in `panels`
    int j = 0;
    for (int64_t t = t0; t < t1; ++t) {
      while (t >= first_task[j + 1]) ++j;
      const TaskSplit& sp = split[j];
      const MatrixView& w = targets[j].w;
      float* y = targets[j].y;
      const int64_t ldy = targets[j].ldy;
      const int64_t local = t - first_task[j];
      const int64_t grp = local / sp.row_chunks, c = local % sp.row_chunks;
      const int64_t p0 = grp * sp.group;
      const int64_t n_in_group = std::min(sp.group, sp.n_panels - p0);
      if (grp != built || j != built_target) {
        for (int64_t i = 0; i < n_in_group; ++i) {
          const int64_t p = p0 + i;
          uint8_t* panel = panels + i * panel_bytes;
          if (w.packed) {
            panel_from_packed_avx512(w, p, nb, panel);
          } else {
            const int n_rows = static_cast<int>(std::min<int64_t>(kPanelRows, w.out - p * kPanelRows));
            repack_int8_panel<Dec>(w, p * kPanelRows, n_rows, nb, panel);
          }
        }
        built = grp;
        built_target = j;
      }
      const int64_t r_end = std::min(rows, (c + 1) * sp.chunk_rows);
      for (int64_t r = c * sp.chunk_rows; r < r_end; r += kInt8TileRows) {
        const int n = static_cast<int>(std::min<int64_t>(kInt8TileRows, r_end - r));
        for (int64_t i = 0; i < n_in_group; ++i) {
          const int64_t o0 = (p0 + i) * kPanelRows;
          const int valid = static_cast<int>(std::min<int64_t>(kPanelRows, w.out - o0));
          int8_tile_any<Dec>(n, panels + i * panel_bytes, nb, act, rows, r, y + r * ldy + o0, ldy, valid);
        }
      }
    }
  };
  if (pool) {
    pool->parallel_for_dynamic(first_task[count], 1, run_tasks);
  } else {
    run_tasks(0, first_task[count], 0);
  }
}

template <class Dec>
void int8_gemm(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
               ThreadPool* pool) {
  const TileMajorActivations act = quantize_tile_major<Dec>(x, rows, ldx, w.in, pool);
  const MatmulTarget target{w, y, ldy};
  int8_gemm_tasks<Dec>(&target, 1, act, rows, pool);
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
  float s[2];        // d * sum q of each block (types with a min), see QuantizedBlock
};

template <class Dec>
void quantize_pairs(const float* x, int64_t rows, int64_t ldx, int64_t nb, PairActivations* out) {
  const int64_t np = (nb + 1) / 2;
  for (int64_t r = 0; r < rows; ++r) {
    PairActivations* row = out + r * np;
    if (nb % 2) std::memset(&row[np - 1], 0, sizeof(PairActivations));  // block 1 of an odd tail stays zero
    // Block b goes to half b % 2 of pair b / 2: quantized 16 blocks at a time (a whole number of K-quant
    // super-blocks) into a contiguous buffer, then copied there.
    alignas(64) int8_t q[16 * kQK];
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
      const int64_t n = std::min<int64_t>(16, nb - b0);
      quantize_row_blocks<Dec::kActivationsQ8K>(x + r * ldx + b0 * kQK, n, q, kQK,
                                                [&](int64_t i, const QuantizedBlock& qb) {
                                                  const int64_t b = b0 + i;
                                                  PairActivations& pa = row[b / 2];
                                                  std::memcpy(pa.q + 32 * (b % 2), q + i * kQK, kQK);
                                                  pa.d[b % 2] = qb.d;
                                                  pa.s[b % 2] = qb.s;
                                                });
    }
    for (int64_t p = 0; p < np; ++p) {
      PairActivations& pa = row[p];
      const __m512i lane_sums =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_load_si512(pa.q));
      _mm512_store_si512(pa.init, _mm512_mullo_epi32(lane_sums, _mm512_set1_epi32(-Dec::kOffset)));
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
  quantize_pairs<Dec>(x, rows, ldx, nb, act);
  const int64_t groups = (w.out + kStreamRows - 1) / kStreamRows;
  parallel_for_guided(pool, groups, 2, [&](int64_t g0, int64_t g1, int) {
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
  const float* xp = pack_row_groups(x, rows, ldx, n, kF32TileRows, pool);
  const TaskSplit split = split_tasks(w.out, rows, pool, kF32TileRows);
  parallel_for(pool, split.n_panels * split.row_chunks, 1, [&](int64_t t0, int64_t t1, int) {
    auto* panel = static_cast<float*>(thread_scratch(kSlotPanel, sizeof(float) * n * kPanelRows));
    auto* rowbuf = static_cast<float*>(thread_scratch(kSlotRows, sizeof(float) * n * 16));
    int64_t built = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / split.row_chunks, c = t % split.row_chunks;
      const int64_t o0 = p * kPanelRows;
      const int count = static_cast<int>(std::min<int64_t>(kPanelRows, w.out - o0));
      // A packed F32 matrix (packed_matrix.h) holds every panel in this layout already.
      static_assert(kPanelRows == kPackedPanelRows, "the packed F32 panel is the tile's");
      const float* tile_panel = panel;
      if (w.packed && w.type == GgmlType::F32) {
        tile_panel = reinterpret_cast<const float*>(w.packed) + p * n * kPanelRows;
      } else if (p != built) {
        build_f32_panel(w, o0, count, panel, rowbuf);
        built = p;
      }
      const int64_t r_end = std::min(rows, (c + 1) * split.chunk_rows);
      for (int64_t r = c * split.chunk_rows; r < r_end; r += kF32TileRows) {
        const int nr = static_cast<int>(std::min<int64_t>(kF32TileRows, r_end - r));
        f32_tile_any(nr, tile_panel, xp + r * n, n, y + r * ldy + o0, ldy, count);
      }
    }
  });
}

// F32 family, few activation rows (decode): the tile's arithmetic (per output one FMA chain over k in
// order, see f32_tile) on weights read straight from their rows. 16 weight rows at a time, one per lane:
// 16 x 16 blocks are loaded (converted to f32 in registers) and transposed, then each k step is one FMA
// per activation row with a broadcast activation, exactly as the tile does from its panel. Up to 8 rows:
// decode's attention scores are 8 query heads against each F16 key row (E2B/E4B: 8 heads per KV head),
// and through the GEMM each 32 keys were first converted and transposed into a panel, which took ~4x the
// products' own time. E2B Q4_0 tg64 at 8192 positions of context (Zen 5, avx512), the two builds
// alternated twice: 22.3-23.0 -> 24.7-24.9 t/s.

constexpr int kF32StreamMaxRows = 8;

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
  // Two prefetches per row and step: this row 128 elements ahead into L1 (16 rows are streamed at once,
  // too many for the hardware prefetchers to follow well), and the next group's row at this k into L2.
  // Against the next-group prefetch alone, F32 rows stream ~40 % faster (gem4_kernel_bench).
  const auto prefetch_row = [&](int j, int64_t k) {
    _mm_prefetch(reinterpret_cast<const char*>(row[j] + k + kPrefetchElems), _MM_HINT_T0);
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(row[j] + k) + ahead, _MM_HINT_T1);
  };
  __m512 c[R];
  for (int r = 0; r < R; ++r) c[r] = _mm512_setzero_ps();
  int64_t k_done = 0;
  if constexpr (std::is_same_v<L, LoadBF16>) {
    // BF16, 32 weights a row at a time: the block is transposed as 16 x 16 pairs of bf16 (one 32-bit
    // lane each), and each transposed pair widens with an integer shift (the even k) and a mask (the
    // odd k), where widening every weight first and transposing 16 x 16 floats takes twice the
    // shuffles per weight, which Intel issues on one port. Same FMA chain in k order, same bits.
    for (; k_done + 32 <= n; k_done += 32) {
      __m512 t[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        prefetch_row(j, k_done);
        t[j] = _mm512_loadu_ps(row[j] + k_done);
      }
      transpose_16x16(t);
      const __m512i odd_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const __m512i pair = _mm512_castps_si512(t[i]);
        const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16));
        const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(pair, odd_mask));
        const int64_t k = k_done + 2 * i;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) c[r] = _mm512_fmadd_ps(even, _mm512_set1_ps(x[r * ldx + k]), c[r]);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) c[r] = _mm512_fmadd_ps(odd, _mm512_set1_ps(x[r * ldx + k + 1]), c[r]);
      }
    }
  }
  for (int64_t k0 = k_done; k0 < n; k0 += 16) {
    const int len = static_cast<int>(std::min<int64_t>(16, n - k0));
    const __mmask16 m = static_cast<__mmask16>((1u << len) - 1);
    __m512 t[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      prefetch_row(j, k0);
      t[j] = L::load(row[j] + k0, m);
    }
    transpose_16x16(t);
    if (len == 16) {
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
#pragma GCC unroll 8
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

// f32_stream_group<L, rows> (1 <= rows <= kF32StreamMaxRows).
template <class L, int R = 1>
void f32_stream_rows(int64_t rows, const MatrixView& w, int64_t o0, int count, const float* x, int64_t ldx,
                     float* y, int64_t ldy) {
  if constexpr (R < kF32StreamMaxRows) {
    if (rows > R) return f32_stream_rows<L, R + 1>(rows, w, o0, count, x, ldx, y, ldy);
  }
  f32_stream_group<L, R>(w, o0, count, x, ldx, y, ldy);
}

template <class L>
void f32_stream(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                ThreadPool* pool) {
  parallel_for_guided(pool, (w.out + 15) / 16, 2, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o0 = 16 * g;
      const int count = static_cast<int>(std::min<int64_t>(16, w.out - o0));
      f32_stream_rows<L>(rows, w, o0, count, x, ldx, y, ldy);
    }
  });
}

}  // namespace

void matmul_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                   ThreadPool* pool) {
  if (w.packed && rows <= kInt8StreamMaxRows && packable_type(w.type)) {
    return packed_gemv_avx512(w, x, rows, ldx, y, ldy, pool);
  }
  if (w.packed && w.type == GgmlType::F32 && rows <= kPackedF32MaxRows) {
    return packed_f32_gemv_avx512(w, x, rows, ldx, y, ldy, pool);
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

bool matmul_shared_input_avx512(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                                ThreadPool* pool) {
  if (count < 1 || count > kMaxSharedTargets) return false;
  const GgmlType t = targets[0].w.type;
  if (!uses_int8_path(t)) return false;
  bool all_packed = true;
  for (int j = 0; j < count; ++j) {
    if (targets[j].w.type != t || targets[j].w.in != targets[0].w.in) return false;
    all_packed = all_packed && targets[j].w.packed;
  }
  if (rows <= kInt8StreamMaxRows) {
    if (!all_packed || !packable_type(t)) return false;
    packed_gemv_shared_avx512(targets, count, x, rows, ldx, pool);
    return true;
  }
  with_int8_decoder(t, [&](auto dec) {
    using Dec = decltype(dec);
    const TileMajorActivations act = quantize_tile_major<Dec>(x, rows, ldx, targets[0].w.in, pool);
    int8_gemm_tasks<Dec>(targets, count, act, rows, pool);
  });
  return true;
}

}  // namespace gem4::matmul_detail
