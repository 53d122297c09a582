// Matrix products between a weight matrix stored in a GGUF type and f32 activations.
// A weight W has `in` columns (ggml ne[0], contiguous) and `out` rows; row o starts at
// data + o * row_bytes. The product is  Y[r, o] = sum_i W[o, i] * X[r, i]  for r < rows.
// Prefill calls it with many rows (GEMM); decode with one (GEMV). Quantized types may quantize the
// activations to 8 bits per 32-element block on the fly, as llama.cpp does.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"

namespace gem4 {

class ThreadPool;

struct MatrixView {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t in = 0;   // columns (reduction length)
  int64_t out = 0;  // rows
  size_t row_bytes = 0;
  // Optional copy of the same weights in the layout of packed_matrix.h, read by every SIMD set's int8
  // kernels when set (data stays valid and is what the other paths read).
  const uint8_t* packed = nullptr;
  // Rows [first, first + count) as a smaller matrix.
  MatrixView rows(int64_t first, int64_t count) const;
};

// The fast path (dispatches on active_isa()). x: rows x in with leading dimension ldx;
// y: rows x out with leading dimension ldy. Threads split the work; pool may be null.
// Batch invariant: on a given ISA, row r of y depends only on row r of x and on w, bit for bit (not on
// `rows`, the row's position in the call, or the pool), so micro-batched and one-shot prompts agree.
void matmul(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
            ThreadPool* pool);

// One of several products that read the same input (matmul_shared_input).
struct MatmulTarget {
  MatrixView w;
  float* y = nullptr;  // rows x w.out, leading dimension ldy
  int64_t ldy = 0;
};

constexpr int kMaxSharedTargets = 4;

// y_j = x W_j^T for each of `count` (<= kMaxSharedTargets) targets sharing x: the q/k/v projections of a layer, or
// gate and up. Bit for bit what separate matmul() calls give. Where the int8 GEMM runs (same quantized
// type and `in` for all, more than a few rows) the input is quantized once and the threads share out
// the tiles of all the products at one barrier, so small products (k and v: 256 outputs) no longer
// pay their own quantization and synchronisation.
void matmul_shared_input(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                         ThreadPool* pool);

// One product of a group (matmul_group): y = x W^T for `rows` rows of x [rows, ldx] into y [rows, ldy].
struct MatmulJob {
  MatrixView w;
  const float* x = nullptr;
  int64_t rows = 0, ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Independent products (each its own weights and input) at one barrier: the experts of a
// mixture-of-experts layer, each on the rows that picked it. Decode runs 2 x 8 expert products of
// 1-2 MB per layer; one barrier each cost a wake-up, a ragged end and a cold start of the stream every
// 50-100 us. Here the threads take slices of all the jobs' output rows (whole 32-row panels), first
// come first served in shrinking chunks, and run each slice on one thread. Bit for bit what separate
// matmul() calls give (a row of y never depends on which rows of W are computed with it).
void matmul_group(const MatmulJob* jobs, int count, ThreadPool* pool);

// BF16 weights: whether the vdpbf16ps kernels are used (activations rounded to bf16, as llama.cpp does
// for BF16 weights; otherwise the weights are converted exactly to f32 and the activations stay f32).
// Auto: on CPUs with AVX512_BF16 that issue vdpbf16ps at full rate (AMD Zen 4/5). Intel's Sapphire and
// Emerald Rapids issue it at one per two cycles, a quarter of their f32 FMA rate, so a vdpbf16ps
// multiply-add costs twice an FMA one there and Auto keeps the f32 path. The choice is fixed per
// process (it changes results by up to the bf16 rounding of the activations); tests force it on.
enum class Bf16Dot { Auto, On, Off };
void set_bf16_dot(Bf16Dot mode);
bool bf16_dot_active();  // this CPU (avx512 active and AVX512_BF16) and the mode

// The decode GEMVs' schedule: their software prefetch and how many panels a thread reads at a time,
// picked per CPU vendor (Auto; see gemv_prefetch_amd in matmul.cpp). The schedules give the same bits;
// tests force each one so that both are checked on any machine.
enum class GemvSchedule { Auto, Amd, Intel };
void set_gemv_schedule(GemvSchedule s);

// Plain scalar reference (dequantize each weight row, f32 dot products in order). Exact semantics
// the fast path is tested against.
void matmul_reference(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y,
                      int64_t ldy);

// Dequantizes row `o` of w into dst[in] (embedding lookups).
void matrix_get_row(const MatrixView& w, int64_t o, float* dst);
// Columns [col0, col0 + n) of row `o` into dst[n]; col0 and n multiples of the type's block size.
void matrix_get_row_part(const MatrixView& w, int64_t o, int64_t col0, int64_t n, float* dst);

}  // namespace gem4
