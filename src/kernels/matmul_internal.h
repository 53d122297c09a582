// Internal to the matmul implementation: what matmul.cpp (dispatch, scalar path) shares with the
// per-ISA kernel files. Declarations only: an inline function defined here would be compiled once per
// ISA flag set and the linker would keep an arbitrary copy, so shared code lives in matmul.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

namespace gem4::matmul_detail {

// Weight types whose 32-element blocks store small unsigned integers u with a scale d (and, for the
// "_1" types, a min m): weight = d * (u - offset) + m. Their fast path quantizes the activations to 8
// bits per block as llama.cpp does (q8_0, or q8_1 with s = d * sum(q) when there is a min) and
// multiplies integers: sum_i w_i x_i = d_w d_x (sum_i u_i q_i - offset * sum_i q_i) + m_w s_x.
// (The AVX-512 path treats the K-quants the same way, 32 elements at a time, with activations quantized
// per 256 as llama.cpp's Q8_K; see block_decode_avx512.h.)
struct Int8Format {
  int offset = 0;        // 128 for Q8_0 (signed bytes biased to unsigned), 8 for Q4_0, 16 for Q5_0
  bool has_min = false;  // Q4_1, Q5_1
};
bool is_int8_type(GgmlType t);

// Software prefetch of the packed decode GEMVs (every kernel set), in bytes ahead of the block being
// read, so that each core keeps more misses in flight than the hardware prefetcher starts on its own
// (it stops at 4 KiB pages). The kernels take it as a template argument: as constants the distances
// are displacements of the prefetch instructions; read from a variable they cost GCC one advancing
// pointer per prefetched line (nine per Q4_0 block, two of them kept on the stack).
struct GemvPrefetch {
  size_t l1, l2;            // l2 0: no prefetch into L2
  bool l1_non_temporal;     // the L1 prefetch as prefetchnta instead of prefetcht0
  bool page_heads = false;  // instead of every line: page-head prefetches (kernels/page_heads.h)
};
constexpr GemvPrefetch kPrefetchL1AndL2{2048, 8192, false}, kPrefetchL1NonTemporal{4096, 0, true},
    kPrefetchPageHeads{0, 0, false, true}, kPrefetchL1{2048, 0, false};
// Intel's decode GEMVs with one activation row read kIntelStreams panels at a time (a power of two), block by
// block (packed_gemv_panels): the L2 streamer follows each, so more lines are on their way from memory per
// core than one stream gets (see matmul.cpp). kMaxStreams: the most any set reads at a time.
constexpr int kIntelStreams = 8, kMaxStreams = 8;
// Whether this CPU takes AMD's prefetches, decided once (see matmul.cpp for the measurements): true,
// kPrefetchPageHeads for Q8_0, Q4_0 and Q6_K, kPrefetchL1NonTemporal for Q4_K and Q5_K; false (Intel),
// kPrefetchL1 and kIntelStreams for every type in every x86 set (the 256-bit sets' prefill panels still take
// kPrefetchL1AndL2).
bool gemv_prefetch_amd();
Int8Format int8_format(GgmlType t);

// A 64-byte aligned per-thread buffer of at least `bytes`, kept between calls (it only grows). `slot`
// tells apart buffers in use at the same time; valid until the next call with that slot on this thread.
// kSlotGroupInput: the packed decode GEMV's quantized input inside matmul_group (see below), which no
// other kernel writes.
enum ScratchSlot { kSlotActivations = 0, kSlotPanel = 1, kSlotRows = 2, kSlotGroupInput = 3, kSlotCount = 4 };
void* thread_scratch(ScratchSlot slot, size_t bytes);
// The F32 GEMMs' activations: x [rows][ldx] copied as groups of `group` rows, each group [n][its rows]
// (the last group may be shorter), so a micro-tile's broadcasts read one contiguous stream. Returns
// the calling thread's kSlotActivations scratch holding them.
float* pack_row_groups(const float* x, int64_t rows, int64_t ldx, int64_t n, int group, ThreadPool* pool);

// matmul_group marks the threads running its pieces (0: none). A group's inputs do not change while it
// runs, so a decode GEMV may quantize an input once per thread and group and reuse it for the group's
// other pieces on the same input (matmul_group hands out pieces of its jobs, each through matmul(), and
// one row's gate|up of eight experts is one input).
void set_group_on_this_thread(uint64_t group);
// Where a decode GEMV quantizes its input x [rows, ldx] of nb blocks in `format` (a tag of the kernel
// file's layout and the format's offsets): outside a group into kSlotActivations (Outside); inside one
// into kSlotGroupInput, which either holds it already (Held) or is to be filled now (Fresh).
enum class GroupInput { Outside, Fresh, Held };
GroupInput group_input(const float* x, int64_t rows, int64_t ldx, int64_t nb, int format);

// The GGUF-layout implementations behind matmul() (the 256-bit sets' packed int8 kernels are declared
// below); arguments already validated, rows >= 1, out >= 1.
void matmul_scalar(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                   ThreadPool* pool);
void matmul_avx2(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool);
void matmul_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                   ThreadPool* pool);
// matmul_shared_input's fast cases: all targets of the same int8-path type and `in`; for more rows
// than the streaming kernels take, each either packed (and read packed) or not; for fewer, all packed.
// Returns false (nothing done) where that does not apply.
bool matmul_shared_input_avx512(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                                ThreadPool* pool);
// Int8 kernels on weights packed at load time (matmul_packed_avx512.cpp): the decode GEMV (rows <= 4)
// on w.packed, and panel p of the int8 GEMM (layout of int8_panel_avx512.h) built from w.packed.
void packed_gemv_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                        ThreadPool* pool);
// F32 weights packed at load time (packed_matrix.h), up to kPackedF32MaxRows activation rows: the
// GGUF-layout F32 kernels' bits without their transpositions (AVX-512 and the 256-bit sets).
constexpr int kPackedF32MaxRows = 8;
void packed_f32_gemv_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y,
                            int64_t ldy, ThreadPool* pool);
void panel_from_packed_avx512(const MatrixView& w, int64_t p, int64_t nb, uint8_t* panel);
// The decode GEMV of 1..4 products sharing x (same packed type and `in`, all with w.packed).
void packed_gemv_shared_avx512(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                               ThreadPool* pool);
// The 256-bit sets' int8 kernels on the packed layout (int8_ymm.inc), one copy per set: the GEMV for
// rows <= kPackedGemvMaxRows, the GEMM above. 1..kMaxSharedTargets products of the same x (same packable
// type and `in`; K-quants with whole super-blocks); a target without a packed copy is packed panel by
// panel as it is read. Returns false (nothing done) where that does not apply.
constexpr int64_t kPackedGemvMaxRows = 4;
namespace ymm_avx2 {
bool packed_int8_matmul(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                        ThreadPool* pool);
}
namespace ymm_avxvnni {
bool packed_int8_matmul(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                        ThreadPool* pool);
}
// BF16 weights with vdpbf16ps (matmul_avx512 calls it when the CPU has AVX512_BF16).
void matmul_bf16_avx512(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                        ThreadPool* pool);

// ---- AArch64 (matmul_neon.cpp and the int8 tiles) ----
// Every AArch64 set reads the GGUF layout (packed copies are an x86 layout and are not made there).
// matmul_neon quantizes the activations as scalar_int8 does, decodes 4 weight rows at a time to signed
// bytes (level - offset) and takes the set's tile for the integer sums, then the scalar path's float
// steps (sum += (d_w d_x) isum, + m_w s_x), so every AArch64 set gives the Scalar set's bits on the
// 8-bit-activation types. The K-quants: the same tiles per 32-element sub-block (Q6_K: per 16-element
// unit) on llama.cpp's Q8_K activations. F32, F16, BF16: f32 weight rows, f32 FMA dots.
void matmul_neon(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool, Isa isa);
// Integer sums of one tile: 4 decoded weight rows against `nrows` (1..4) quantized activation rows,
// every 32-element block b < nb: isum[(r * nb + b) * 4 + j] = sum_i w_j[32b + i] * q_r[32b + i].
// panel: per block 128 bytes; act: per row (or, interleaved, per pair of rows) nb * 32 (64) bytes.
// Plain layout: row j's 32 bytes at 32j. Interleaved (smmla): rows 2p, 2p+1 as 4 chunks of 8 + 8
// bytes at 64p + 16c, and activation rows paired the same way (the odd last row with zeros).
using Int8TileFn = void (*)(const int8_t* panel, const int8_t* act, int64_t nb, int nrows, int32_t* isum);
struct Int8Tile {
  Int8TileFn fn = nullptr;
  bool interleaved = false;
};
Int8Tile int8_tile_neon();     // matmul_int8_neon.cpp: smull/smlal + sadalp (ARMv8.0)
Int8Tile int8_tile_dotprod();  // matmul_int8_dotprod.cpp: sdot
Int8Tile int8_tile_i8mm();     // matmul_int8_i8mm.cpp: smmla on pairs of rows

}  // namespace gem4::matmul_detail
