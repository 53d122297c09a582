// Matrix products: the plain reference, argument checks, ISA dispatch and the portable (scalar) fast
// path. The SIMD kernels live in matmul_avx512.cpp (+ matmul_packed_avx512.cpp), int8_ymm.inc (the
// AVX2 / AVX-VNNI int8 kernels on packed weights) and matmul_avx2.cpp (their GGUF-layout rest) on
// x86-64; in matmul_neon.cpp (+ the int8 tiles of matmul_int8_{neon,dotprod,i8mm}.cpp) on AArch64.
#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemv_streams.h"
#include "kernels/matmul_internal.h"
#include "kernels/packed_matrix.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4 {

using matmul_detail::Int8Format;

MatrixView MatrixView::rows(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > out) {
    throw std::out_of_range("MatrixView::rows: rows [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") outside a matrix of " + std::to_string(out) +
                            " rows");
  }
  MatrixView v = *this;
  v.data = static_cast<const uint8_t*>(data) + static_cast<size_t>(first) * row_bytes;
  v.out = count;
  // A packed copy can be sliced at panel boundaries only.
  if (packed) {
    v.packed = first % kPackedPanelRows == 0
                   ? packed + size_t(first / kPackedPanelRows) * size_t(in / kQK) * packed_block_bytes(type)
                   : nullptr;
  }
  return v;
}

void matrix_get_row(const MatrixView& w, int64_t o, float* dst) {
  if (o < 0 || o >= w.out) {
    throw std::out_of_range("matrix_get_row: row " + std::to_string(o) + " of a matrix with " +
                            std::to_string(w.out) + " rows");
  }
  dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(o) * w.row_bytes, dst,
                 w.in);
}

void matrix_get_row_part(const MatrixView& w, int64_t o, int64_t col0, int64_t n, float* dst) {
  const int64_t be = ggml_block_elems(w.type);
  if (o < 0 || o >= w.out || col0 < 0 || n < 0 || col0 + n > w.in || col0 % be != 0 || n % be != 0) {
    throw std::out_of_range("matrix_get_row_part: row " + std::to_string(o) + ", columns " +
                            std::to_string(col0) + " + " + std::to_string(n) + " of a " +
                            ggml_type_name(w.type) + " matrix " + std::to_string(w.out) + " x " +
                            std::to_string(w.in) + " (blocks of " + std::to_string(be) + ")");
  }
  const auto* row = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(o) * w.row_bytes;
  dequantize_row(w.type, row + ggml_row_bytes(w.type, col0), dst, n);
}

namespace {

void check_args(const char* fn, const MatrixView& w, const float* x, int64_t rows, int64_t ldx,
                const float* y, int64_t ldy) {
  // Built only for an error message: this runs on every product (hundreds per decoded token).
  auto where = [&] {
    return std::string(fn) + " (" + ggml_type_name(w.type) + " " + std::to_string(w.out) + " x " +
           std::to_string(w.in) + ", " + std::to_string(rows) + " rows): ";
  };
  if (!is_supported_weight_type(w.type)) {
    throw UnsupportedType(where() + "weight type " + ggml_type_name(w.type) + " is not supported");
  }
  const int64_t be = ggml_block_elems(w.type);
  if (w.in <= 0 || w.in % be != 0) {
    throw std::invalid_argument(where() + "in must be a positive multiple of the block size " +
                                std::to_string(be));
  }
  if (w.out < 0 || rows < 0) throw std::invalid_argument(where() + "negative dimension");
  if (w.row_bytes < ggml_row_bytes(w.type, w.in)) {
    throw std::invalid_argument(where() + "row_bytes " + std::to_string(w.row_bytes) + " is less than a row (" +
                                std::to_string(ggml_row_bytes(w.type, w.in)) + " bytes)");
  }
  if (ldx < w.in) throw std::invalid_argument(where() + "ldx " + std::to_string(ldx) + " < in");
  if (ldy < w.out) throw std::invalid_argument(where() + "ldy " + std::to_string(ldy) + " < out");
  if (rows > 0 && w.out > 0 && (!w.data || !x || !y)) throw std::invalid_argument(where() + "null pointer");
}

const uint8_t* row_ptr(const MatrixView& w, int64_t o) {
  return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(o) * w.row_bytes;
}

}  // namespace

void matmul_reference(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy) {
  check_args("matmul_reference", w, x, rows, ldx, y, ldy);
  std::vector<float> wrow(static_cast<size_t>(w.in));
  for (int64_t o = 0; o < w.out; ++o) {
    dequantize_row(w.type, row_ptr(w, o), wrow.data(), w.in);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * ldx;
      float acc = 0.0f;
      for (int64_t i = 0; i < w.in; ++i) acc += wrow[i] * xr[i];
      y[r * ldy + o] = acc;
    }
  }
}

namespace {
std::atomic<Bf16Dot> g_bf16_dot{Bf16Dot::Auto};
std::atomic<GemvSchedule> g_gemv_schedule{GemvSchedule::Auto};

#if defined(__x86_64__)
using YmmInt8 = bool (*)(const MatmulTarget*, int, const float*, int64_t, int64_t, ThreadPool*);
YmmInt8 ymm_int8(Isa isa) {
  return isa == Isa::AvxVnni ? matmul_detail::ymm_avxvnni::packed_int8_matmul
                             : matmul_detail::ymm_avx2::packed_int8_matmul;
}
#endif
}  // namespace

void set_bf16_dot(Bf16Dot mode) { g_bf16_dot.store(mode); }
void set_gemv_schedule(GemvSchedule s) { g_gemv_schedule.store(s); }

bool bf16_dot_active() {
  const CpuFeatures& f = cpu_features();
  if (active_isa() != Isa::Avx512 || !f.avx512bf16) return false;
  switch (g_bf16_dot.load()) {
    case Bf16Dot::On:
      return true;
    case Bf16Dot::Off:
      return false;
    case Bf16Dot::Auto:
      break;
  }
  return f.amd;
}

void matmul(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
            ThreadPool* pool) {
  check_args("matmul", w, x, rows, ldx, y, ldy);
  if (rows == 0 || w.out == 0) return;
  // Below 64 K multiply-adds (a few microseconds) waking the other threads costs more than it saves.
  // Above, even small decode products gain: their weights come from memory, which one core cannot
  // stream alone (a 256 x 1536 Q4_0 GEMV on cold weights, E2B's per-layer-input projections: 19.4 us on
  // one thread, 13.5 on two). Results do not depend on the thread count, so this changes only speed.
  if (double(w.in) * double(w.out) * double(rows) < double(1 << 16)) pool = nullptr;
  switch (active_isa()) {
#if defined(__x86_64__)
    case Isa::Avx512:
      if (w.packed && !reads_packed(w)) {  // packed reading switched off (bench --repack 0)
        MatrixView plain = w;
        plain.packed = nullptr;
        return matmul_detail::matmul_avx512(plain, x, rows, ldx, y, ldy, pool);
      }
      return matmul_detail::matmul_avx512(w, x, rows, ldx, y, ldy, pool);
    case Isa::Avx2:
    case Isa::AvxVnni: {
      // Packed reading on: the packed-layout int8 kernels (reading w's copy, or packing as they go);
      // off (bench --repack 0): the GGUF-layout kernels, K-quants through f32.
      const MatmulTarget target{w, y, ldy};
      if (use_packed() && packable_type(w.type) && ymm_int8(active_isa())(&target, 1, x, rows, ldx, pool)) return;
      MatrixView plain = w;  // F32 keeps its packed copy for the F32 GEMV where packed reading is on
      if (packable_type(w.type) || !reads_packed(w)) plain.packed = nullptr;
      return matmul_detail::matmul_avx2(plain, x, rows, ldx, y, ldy, pool);
    }
#elif defined(__aarch64__)
    case Isa::Neon:
    case Isa::NeonDotprod:
    case Isa::NeonI8mm:
      return matmul_detail::matmul_neon(w, x, rows, ldx, y, ldy, pool, active_isa());
#endif
    default:
      break;
  }
  matmul_detail::matmul_scalar(w, x, rows, ldx, y, ldy, pool);
}

void matmul_shared_input(const MatmulTarget* targets, int count, const float* x, int64_t rows, int64_t ldx,
                         ThreadPool* pool) {
  if (count < 0 || count > kMaxSharedTargets) {
    throw std::invalid_argument("matmul_shared_input: " + std::to_string(count) + " targets (at most " +
                                std::to_string(kMaxSharedTargets) + ")");
  }
  double macs = 0;
  bool any_empty = rows == 0;
  MatmulTarget buf[kMaxSharedTargets];
  std::copy(targets, targets + count, buf);
  const std::span<MatmulTarget> plain(buf, size_t(count));
  for (MatmulTarget& t : plain) {
    check_args("matmul_shared_input", t.w, x, rows, ldx, t.y, t.ldy);
    if (t.w.packed && !reads_packed(t.w)) t.w.packed = nullptr;  // packed reading switched off
    macs += double(t.w.in) * double(t.w.out) * double(rows);
    any_empty = any_empty || t.w.out == 0;
  }
#if defined(__x86_64__)
  if (!any_empty && macs >= double(1 << 19) && active_isa() == Isa::Avx512 &&
      matmul_detail::matmul_shared_input_avx512(plain.data(), count, x, rows, ldx, pool)) {
    return;
  }
  if (!any_empty && (active_isa() == Isa::Avx2 || active_isa() == Isa::AvxVnni) && use_packed() &&
      packable_type(plain[0].w.type)) {
    if (macs < double(1 << 16)) pool = nullptr;  // as matmul() does
    if (ymm_int8(active_isa())(plain.data(), count, x, rows, ldx, pool)) return;
  }
#endif
  for (const MatmulTarget& t : plain) matmul(t.w, x, rows, ldx, t.y, t.ldy, pool);
}

void matmul_group(const MatmulJob* jobs, int count, ThreadPool* pool) {
  if (count < 0) throw std::invalid_argument("matmul_group: negative job count");
  double macs = 0;
  for (int j = 0; j < count; ++j) {
    const MatmulJob& t = jobs[j];
    check_args("matmul_group", t.w, t.x, t.rows, t.ldx, t.y, t.ldy);
    macs += double(t.w.in) * double(t.w.out) * double(t.rows);
  }
  // One thread, or too little work to share out: the jobs one after the other (each call may still
  // use the pool when it is big enough on its own).
  if (!pool || pool->size() == 1 || count <= 1 || macs < double(1 << 18)) {
    for (int j = 0; j < count; ++j) {
      const MatmulJob& t = jobs[j];
      matmul(t.w, t.x, t.rows, t.ldx, t.y, t.ldy, pool);
    }
    return;
  }
  // Work units: the panels of every job, laid end to end (first[j]: job j's first unit).
  std::vector<int64_t> first(size_t(count) + 1, 0);
  for (int j = 0; j < count; ++j) {
    const int64_t out = jobs[j].rows > 0 ? jobs[j].w.out : 0;
    first[j + 1] = first[j] + (out + kPackedPanelRows - 1) / kPackedPanelRows;
  }
  static std::atomic<uint64_t> next_group{1};
  const uint64_t group = next_group.fetch_add(1, std::memory_order_relaxed);
  // In shares, as the decode GEMVs hand theirs out (hand_out_panels), 16 panels a step: each step's
  // pieces are matmul() calls of their own, which steps of one or two panels made too many (26B-A4B Q4_0
  // decode, tokens alternated on a Zen 5 VM: 1-panel steps 1.026 of the guided hand-out's time, 16 to 64
  // panels 0.985-0.990).
  constexpr int64_t kGroupStep = 16;
  matmul_detail::hand_out_panels(pool, first[count], kGroupStep, [&](int64_t b, int64_t e, int) {
    struct InGroup {  // this thread runs the group's pieces until the end of the hand-out
      explicit InGroup(uint64_t g) { matmul_detail::set_group_on_this_thread(g); }
      ~InGroup() { matmul_detail::set_group_on_this_thread(0); }
    } in_group(group);
    int j = int(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1;
    for (; j < count && first[j] < e; ++j) {
      const MatmulJob& t = jobs[j];
      const int64_t r0 = (std::max(b, first[j]) - first[j]) * kPackedPanelRows;
      const int64_t r1 = std::min((std::min(e, first[j + 1]) - first[j]) * kPackedPanelRows, t.w.out);
      if (r1 <= r0) continue;
      matmul(t.w.rows(r0, r1 - r0), t.x, t.rows, t.ldx, t.y + r0, t.ldy, nullptr);
    }
  });
}

namespace matmul_detail {

// Intel's 256-bit sets prefetch 2 KiB ahead into L1 and 8 KiB into L2: on a Sapphire Rapids Xeon
// (interleaved gem4_kernel_bench repetitions) the L1 prefetch was worth ~20 % on Q4_0 and the L2 one
// another ~7 % (2-4 % on Q8_0); prefetchnta alone (nothing into L2) halved the speed. Intel's AVX-512
// set prefetched 4 KiB ahead with prefetchnta and kept the prefetcht1 8 KiB ahead (until it read eight
// streams, below). On an Emerald Rapids Xeon (2 vCPUs), variants compiled in and runs
// of `gem4 bench -p 0 -n 32 -r 2|3 --roofline` alternated: 26B-A4B Q4_0 decode 28.22 -> 29.30 GB/s of
// weights (means of 6 rounds; 6 of 7 pairs faster, one equal), E2B Q4_K_M 26.2 / 27.5 -> 28.4 / 28.4,
// E2B Q4_0 +1 %, Q8_0 -0.8 % (3 rounds; noise); the builds alternated later, in a slower state of the
// VM: 26B-A4B 27.19 / 26.66 -> 27.32 / 27.70, E2B Q4_K_M within the noise. In the 256-bit sets the
// same was within +-1 % (E2B Q4_0 and Q4_K_M, AVX2 and AVX-VNNI, 4 rounds each): they keep theirs.
// 4 KiB + 16 KiB with prefetcht0 came within 0.3 % (3 rounds); 4 + 16, 8 + 16 and 4 + 12 with
// prefetchnta and AMD's Q6_K choice (8 + 24) lay between the two; L1 or L2 alone (2 KiB, 8 KiB) did worse
// than both. AMD takes 4 KiB into L1 and nothing into L2. On a Zen 5 EPYC, each repetition paired with the
// read loop measured right before and after it: AVX-512 Q4_0 +7-9 % (one 100 MB matrix, and 8 of 128 26B-A4B
// experts at one barrier), Q8_0 +3 %, Q4_K +1 %, the best of 1-8 KiB. With the variants compiled in and
// alternated in one process (40 rounds): AVX-512 Q6_K +4-8 %, Q5_K +4 % (8192 x 2816; an earlier, unpaired
// test had them losing 5 %); the AVX2 and AVX-VNNI sets forced, Q8_0, Q4_0, Q4_K +0.4 to +5.6 % (2048 x
// 2816), where 4 KiB into L1 and 16 KiB into L2 was no better than 2 + 8. On AMD the L1 prefetch is
// prefetchnta (the line comes to L1 without displacing what L2 holds): decoded tokens alternated between it
// and prefetcht0 inside one `gem4 bench -p 0 -n 128|256 -r 2` (Zen 5 VM; median of the pairs' time ratios,
// 64-128 pairs a run, two runs each): AVX-512 E2B Q4_0 0.962-0.997, Q8_0 0.960-0.970, Q4_K_M 0.981-1.000,
// 26B-A4B Q4_0 0.984-0.998, E4B Q4_0 0.996-1.004; forced AVX2 E2B Q4_0 0.980-0.985, AVX-VNNI 0.984-0.987,
// AVX2 26B-A4B 0.976-1.005. Without any software prefetch the time was 1.05-1.17x, with 12 KiB into L2
// added 1.02-1.05x; the non-temporal prefetch 8 KiB ahead was no different from 4 (0.98-1.005), 2 KiB
// ahead took 1.006-1.037x the time. On AMD Q8_0 and Q4_0 now take page-head prefetches instead
// (kernels/page_heads.h): tokens alternated with the per-line prefetchnta in one `gem4 bench -p 0 -n 128
// -r 2` (Zen 5 VM, median of 128 pairs' time ratios): AVX-512 E2B Q4_0 0.891, Q8_0 0.851, E4B Q4_0
// 0.858; forced AVX2 E2B Q4_0 0.935, Q8_0 0.907; AVX-VNNI 0.922, 0.821. The K-quants keep prefetchnta:
// with page heads E2B Q4_K_M (Q4_K, and Q6_K as its LM head) took 1.12-1.26x the time, the Q6_K LM
// head streaming at 54 % of its plain read instead of 92 % (the Q6_K layout and kernel of that time).
// The AVX-512 set's Q6_K then took prefetchnta 8 KiB ahead and prefetcht1 24 KiB ahead: the packed
// 262144 x 1536 LM head alone (60-100 rounds, median of its speed as a share of a plain read of its
// bytes) 0.690 -> 0.749; page heads 0.52-0.56. Since the six-slot layout with a block's lines loaded
// first (matmul_packed_avx512.cpp), page heads win for Q6_K in every set, and it takes them. On a Zen 5
// VM (2026-12-07), that LM head against the fastest read loop over its bytes, the two prefetches
// alternated in one process (12-16 rounds, medians): AVX-512 0.69-0.86 -> 0.80-0.97, better in every
// run (12 and 16 KiB ahead did as well as 8, 4 KiB as well in one run and worse in the other), AVX2
// 0.68-0.93 -> 0.82-0.98, AVX-VNNI 0.76-0.94 -> 0.78-0.90 (better in three runs of five). Whole
// `gem4 bench -p 0 -n 32 -r 2 --prune 1 --roofline --products` runs, old and new binaries alternated
// (LM head GB/s, old -> new): AVX-512 E2B Q4_0 58.7-64.1 -> 70.6-73.7, Q4_K_M 56.7-57.2 -> 67.6-70.9,
// E4B Q4_0 48.0-51.8 -> 50.4-65.3; AVX2 E2B Q4_0 50.7, 61.2 -> 57.2, 58.0, Q4_K_M 51.8, 54.4 -> 49.2,
// 60.8, E4B 43.6, 52.7 -> 52.9, 60.3; AVX-VNNI E2B Q4_0 54.0 -> 62.9, Q4_K_M 50.2 -> 50.8. Q4_K and Q5_K
// keep prefetchnta 4 KiB ahead: page heads for them too slowed E2B Q4_K_M's Q4_K products (AVX-512,
// 12288 x 1536: 71-72 -> 58-63 GB/s) and the whole token (1.05-1.14x the time).
// On Intel every x86 set's GEMVs with one activation row read eight panels at a time, block by block
// (kIntelStreams; packed_gemv_panels, gemv_panels_one_row), every type prefetched 2 KiB ahead into L1
// only (kPrefetchL1).
// On an Ice Lake Xeon VM (family 6 model 106, 2 vCPUs): two threads read 21-23 GB/s in one stream each,
// 27-29 in four interleaved 27 KB panels and 29-30 in eight (one thread 12 GB/s: each core is limited by
// the lines it has on their way, not the memory). One E2B token's products (Q4_0, and the Q6_K LM head),
// variants alternated token by token in one process (median of 20-30 pairs' time ratios against one
// stream with prefetchnta 4 KiB + prefetcht1 8 KiB): four streams 0.857 with prefetcht0 2 KiB, 0.868 with
// 4 KiB, 1.044 with the old prefetches, 1.14 without any; eight 0.976 of four (Q8_0 0.970, Q4_K 0.975).
// The Q4_0 gate|up products alone: eight streams 0.834. Whole E2B files, `gem4 bench -p 0 -n 32 -r 3
// --roofline`, one stream (old prefetches) -> eight: Q4_0 21.7 -> 24.0 GB/s of weights, Q8_0 17.0 ->
// 21.6, Q4_K_M 16.7 -> 25.2, E4B Q4_0 21.3 -> 26.6. One stream, prefetcht0 4 KiB alone came within 1-2 %
// of the old prefetches, prefetchnta alone (AMD's) took 2.4x the time. The AVX2 set forced there (the
// token alternated as above, against one stream with prefetcht0 2 KiB + prefetcht1 8 KiB): four or
// eight streams 0.837-0.862 (Q4_0), 0.890-0.899 (Q4_K); with the L2 prefetch kept 0.93-0.97. The AVX-VNNI
// set takes the same, unmeasured (no AVX-VNNI on that CPU); AMD keeps one stream: not measured there.
bool gemv_prefetch_amd() {
  static const bool amd = cpu_features().amd;
  switch (g_gemv_schedule.load(std::memory_order_relaxed)) {
    case GemvSchedule::Amd:
      return true;
    case GemvSchedule::Intel:
      return false;
    case GemvSchedule::Auto:
      break;
  }
  return amd;
}

bool is_int8_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 ||
         t == GgmlType::Q5_1;
}

Int8Format int8_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0:
      return {128, false};
    case GgmlType::Q4_0:
      return {8, false};
    case GgmlType::Q5_0:
      return {16, false};
    case GgmlType::Q4_1:
      return {0, true};
    case GgmlType::Q5_1:
      return {0, true};
    default:
      throw std::logic_error(std::string("int8_format: not an 8-bit-activation type: ") + ggml_type_name(t));
  }
}

namespace {
thread_local uint64_t t_group = 0;
}  // namespace

void set_group_on_this_thread(uint64_t group) { t_group = group; }

GroupInput group_input(const float* x, int64_t rows, int64_t ldx, int64_t nb, int format) {
  if (t_group == 0) return GroupInput::Outside;
  // What kSlotGroupInput holds on this thread: the input it was quantized from, in which group and format.
  struct Held {
    uint64_t group;
    const float* x;
    int64_t rows, ldx, nb;
    int format;
    bool operator==(const Held&) const = default;
  };
  thread_local Held held{};
  const Held want{t_group, x, rows, ldx, nb, format};
  if (held == want) return GroupInput::Held;
  held = want;
  return GroupInput::Fresh;
}

void* thread_scratch(ScratchSlot slot, size_t bytes) {
  struct Buffer {
    std::unique_ptr<uint8_t[]> storage;
    size_t capacity = 0;  // usable bytes after alignment
    uint8_t* aligned = nullptr;
  };
  thread_local Buffer buffers[kSlotCount];
  Buffer& b = buffers[slot];
  if (b.capacity < bytes) {
    const size_t want = std::max(bytes, b.capacity + b.capacity / 2);
    b.storage.reset(new uint8_t[want + 64]);
    const auto addr = reinterpret_cast<uintptr_t>(b.storage.get());
    b.aligned = b.storage.get() + ((64 - addr % 64) % 64);
    b.capacity = want;
  }
  return b.aligned;
}

float* pack_row_groups(const float* x, int64_t rows, int64_t ldx, int64_t n, int group, ThreadPool* pool) {
  auto* xp = static_cast<float*>(thread_scratch(kSlotActivations, sizeof(float) * rows * n));
  parallel_for(pool, (rows + group - 1) / group, 1, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r0 = g * group;
      const int nr = static_cast<int>(std::min<int64_t>(group, rows - r0));
      float* dst = xp + r0 * n;
      for (int64_t k = 0; k < n; ++k)
        for (int i = 0; i < nr; ++i) dst[k * nr + i] = x[(r0 + i) * ldx + k];
    }
  });
  return xp;
}

// ------------------------------------------------------------------------------------------------
// Portable fast path: the same arithmetic as the SIMD kernels (8-bit activations for the legacy
// quantized types), written as plain loops. Used on CPUs without AVX2 and as a readable statement of
// what the SIMD code computes.

namespace {

// One activation block quantized like llama.cpp's x86 quantize_row_q8_0/q8_1: d = amax / 127 stored as
// fp16, q = round-half-even(x * 127 / amax) (the inverse of the unrounded d), s = fp16(d * sum q).
struct Q8Block {
  int8_t q[kQK];
  float d;  // fp16-rounded scale
  int sum;  // sum of q
  float s;  // fp16-rounded d * sum
};

void quantize_activation_block(const float* x, Q8Block* out) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  out->d = fp16_to_fp32(fp32_to_fp16(d));
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    out->q[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
    sum += out->q[j];
  }
  out->sum = sum;
  out->s = fp16_to_fp32(fp32_to_fp16(d * static_cast<float>(sum)));
}

// The unsigned integers u[32], scale and min of one block of an Int8Format type.
void decode_block(GgmlType t, const uint8_t* blk, uint8_t* u, float* d, float* m) {
  *m = 0.0f;
  switch (t) {
    case GgmlType::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(blk);
      *d = fp16_to_fp32(b->d);
      for (int j = 0; j < kQK; ++j) u[j] = static_cast<uint8_t>(b->qs[j] + 128);
      return;
    }
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      const uint8_t* qs;
      if (t == GgmlType::Q4_0) {
        const auto* b = reinterpret_cast<const BlockQ4_0*>(blk);
        *d = fp16_to_fp32(b->d);
        qs = b->qs;
      } else {
        const auto* b = reinterpret_cast<const BlockQ4_1*>(blk);
        *d = fp16_to_fp32(b->d);
        *m = fp16_to_fp32(b->m);
        qs = b->qs;
      }
      for (int j = 0; j < 16; ++j) {
        u[j] = qs[j] & 0x0F;
        u[j + 16] = qs[j] >> 4;
      }
      return;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const uint8_t *qs, *qh_bytes;
      if (t == GgmlType::Q5_0) {
        const auto* b = reinterpret_cast<const BlockQ5_0*>(blk);
        *d = fp16_to_fp32(b->d);
        qs = b->qs;
        qh_bytes = b->qh;
      } else {
        const auto* b = reinterpret_cast<const BlockQ5_1*>(blk);
        *d = fp16_to_fp32(b->d);
        *m = fp16_to_fp32(b->m);
        qs = b->qs;
        qh_bytes = b->qh;
      }
      uint32_t qh;
      std::memcpy(&qh, qh_bytes, sizeof qh);
      for (int j = 0; j < 16; ++j) {
        u[j] = static_cast<uint8_t>((qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
        u[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      }
      return;
    }
    default:
      throw std::logic_error("decode_block: not an 8-bit-activation type");
  }
}

void scalar_int8(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                 ThreadPool* pool) {
  const Int8Format fmt = int8_format(w.type);
  const int64_t nb = w.in / kQK;
  const size_t block_bytes = ggml_row_bytes(w.type, kQK);
  auto* act = static_cast<Q8Block*>(thread_scratch(kSlotActivations, sizeof(Q8Block) * rows * nb));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) quantize_activation_block(x + r * ldx + b * kQK, &act[r * nb + b]);
  }
  parallel_for(pool, w.out, 16, [&](int64_t o0, int64_t o1, int) {
    for (int64_t o = o0; o < o1; ++o) {
      const uint8_t* wrow = row_ptr(w, o);
      for (int64_t r = 0; r < rows; ++r) {
        const Q8Block* xa = act + r * nb;
        float sum = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          uint8_t u[kQK];
          float dw, mw;
          decode_block(w.type, wrow + b * block_bytes, u, &dw, &mw);
          int isum = 0;
          for (int j = 0; j < kQK; ++j) isum += u[j] * xa[b].q[j];
          isum -= fmt.offset * xa[b].sum;
          sum += (dw * xa[b].d) * static_cast<float>(isum);
          if (fmt.has_min) sum += mw * xa[b].s;
        }
        y[r * ldy + o] = sum;
      }
    }
  });
}

void scalar_f32(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                ThreadPool* pool) {
  parallel_for(pool, w.out, 16, [&](int64_t o0, int64_t o1, int) {
    auto* wrow = static_cast<float*>(thread_scratch(kSlotRows, sizeof(float) * w.in));
    for (int64_t o = o0; o < o1; ++o) {
      dequantize_row(w.type, row_ptr(w, o), wrow, w.in);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * ldx;
        // Eight partial sums break the add dependency chain.
        float acc[8] = {};
        int64_t i = 0;
        for (; i + 8 <= w.in; i += 8) {
          for (int k = 0; k < 8; ++k) acc[k] += wrow[i + k] * xr[i + k];
        }
        for (; i < w.in; ++i) acc[0] += wrow[i] * xr[i];
        y[r * ldy + o] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      }
    }
  });
}

}  // namespace

void matmul_scalar(const MatrixView& w, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy,
                   ThreadPool* pool) {
  if (is_int8_type(w.type)) {
    scalar_int8(w, x, rows, ldx, y, ldy, pool);
  } else {
    scalar_f32(w, x, rows, ldx, y, ldy, pool);
  }
}

}  // namespace matmul_detail
}  // namespace gem4
