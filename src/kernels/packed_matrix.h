// Weight matrices repacked once, at load time, for the int8 kernels of every SIMD kernel set (Q8_0,
// Q4_0, Q4_K, Q5_K, Q6_K) and for the F32 decode GEMVs. The layout is made for 64-byte vectors; the
// 256-bit sets (AVX2, AVX-VNNI) read each 64-byte vector as two ymm of 8 rows.
//
// In the GGUF layout a weight row's blocks are contiguous, so a kernel that keeps one output per f32
// lane (which batch invariance needs, see matmul_avx512.cpp) must transpose every block it reads; on
// decode that transposition, not memory, was the limit. The packed layout stores 32 weight rows
// ("a panel") interleaved the way vpdpbusd consumes them, so decode streams each byte once with no
// shuffles and prefill builds its register panels with plain copies.
//
// Panel p holds rows [32p, 32p + 32) (rows past the end repeat the last row); per 32-element block b,
// at offset (p * nb + b) * block_bytes:
//   Q8_0: 8 groups g x 2 halves h x 64 bytes: lane j (4 bytes) = levels q + 128 of elements 4g..4g+3 of
//         row 16h + j;                                                          then 32 fp16 scales.
//   Q4_0: 4 groups g x 2 halves h x 64 bytes: lane j = bytes 4g..4g+3 of row 16h + j's nibbles, i.e.
//         low nibbles elements 4g..4g+3, high nibbles elements 16+4g..16+4g+3;   then 32 fp16 scales.
//   Q4_K: per 256-element super-block a header of 32 fp16 d and 32 fp16 dmin, then per 32-element
//         sub-block the Q4_0 layout of its levels, the rows' 6-bit scales and mins as bytes (32 + 32).
//   Q5_K: as Q4_K, with after the nibbles the levels' bit 4 (128 bytes: half h, lane j, byte k holds in
//         bit G that of element 4G + k of row 16h + j), then scales and mins.
//   Q6_K: per 256-element super-block a header of 32 fp16 d, then per 32-element block the 6-bit
//         levels in six slot vectors s (768 bytes: half h, lane j, byte k of slot s holds in bits 0-5
//         the level of element 4G + k of row 16h + j, G = kQ6KSlotGroup[s] = 0, 4, 1, 5, 2, 3, and in
//         bits 6-7 bits 2(s / 2), 2(s / 2) + 1 of that of element 4(6 + s % 2) + k) and the int8 scales
//         of the block's lower and upper 16 elements (32 + 32 bytes).
//   F32:  per element k of the block the 32 rows' values, rows 16h..16h+15 in the 64 bytes of half h
//         (4096 bytes): the GEMV's FMA chains read it in order, with no transposition.
// Q8_0, Q4_0 and Q6_K take the same bytes as the GGUF types (34, 18 and 26.25 per row and 32 elements),
// Q4_K and Q5_K half a byte more (18.5, 22.5: their 6-bit scales and mins unpacked to bytes once, not
// once per token).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/byte_span.h"
#include "kernels/matmul.h"

namespace gem4 {

class ThreadPool;

constexpr int kPackedPanelRows = 32;
// Q4_K's packed super-block: fp16 d and dmin of the 32 rows, then 8 blocks of nibbles, scales and mins.
constexpr size_t kPackedQ4KHeaderBytes = 128, kPackedQ4KBlockBytes = 512 + 32 + 32;
constexpr size_t kPackedQ4KSuperBytes = kPackedQ4KHeaderBytes + 8 * kPackedQ4KBlockBytes;
// Q5_K's: the same header, then 8 blocks of nibbles, top bits, scales and mins.
constexpr size_t kPackedQ5KHeaderBytes = 128, kPackedQ5KBlockBytes = 512 + 128 + 32 + 32;
constexpr size_t kPackedQ5KSuperBytes = kPackedQ5KHeaderBytes + 8 * kPackedQ5KBlockBytes;
// Q6_K's packed super-block: the d header, then 8 blocks of levels and scales.
constexpr size_t kPackedQ6KHeaderBytes = 64, kPackedQ6KBlockBytes = 6 * 128 + 64;
// The group of 4 elements whose levels Q6_K's level slot s holds in bits 0-5: the lower group g beside
// the upper g + 4 (g = 0, 1), then groups 2 and 3; groups 6 and 7 ride in bits 6-7.
constexpr int kQ6KSlotGroup[6] = {0, 4, 1, 5, 2, 3};
constexpr size_t kPackedQ6KSuperBytes = kPackedQ6KHeaderBytes + 8 * kPackedQ6KBlockBytes;
// F32's block: 32 elements of 32 rows.
constexpr size_t kPackedF32BlockBytes = 32 * kPackedPanelRows * sizeof(float);

// Types with a packed layout for the int8 kernels.
bool packable_type(GgmlType t);
// Types with a packed layout: the int8 ones and F32 (read by the F32 decode GEMVs only; prefill reads
// F32 weights in the GGUF layout).
bool has_packed_layout(GgmlType t);
// Bytes of one panel's block (quants + scales); 0 for other types.
size_t packed_block_bytes(GgmlType t);
// Bytes of the whole packed matrix (0 when the type has no packed layout).
size_t packed_matrix_bytes(const MatrixView& w);

// Writes the packed layout of w into dst (packed_matrix_bytes(w) bytes, 64-byte aligned).
void pack_matrix(const MatrixView& w, uint8_t* dst, ThreadPool* pool);
// Panel p alone (rows [32p, 32p + 32)): (in / 32) * packed_block_bytes(w.type) bytes, 64-byte aligned.
// The 256-bit kernel sets pack a matrix that has no packed copy panel by panel as they read it.
void pack_panel(const MatrixView& w, int64_t p, uint8_t* dst);

// Whether the kernels read packed copies (default true). Off, they read the GGUF layout as if no copy
// existed: `gem4 bench --repack 1,0` measures what the packed layout buys. Results are identical.
void set_use_packed(bool on);
bool use_packed();
// Whether the active kernel set has kernels for the packed layout (every set but scalar).
bool packed_kernels_active();
// Whether matmul reads w's packed copy: it has one, packed reading is on, and the active kernel set
// knows the layout.
bool reads_packed(const MatrixView& w);
// The bytes matmul streams for w: its packed copy where it reads one (Q4_K's is a third larger than the
// GGUF tensor), else the tensor.
ByteSpan streamed_weights(const MatrixView& w);

// Whether w gets a packed copy: its type has a packed layout, packed kernels are active and the
// shape fits (rows, whole 32-element blocks).
bool wants_packed_copy(const MatrixView& w);

// A fingerprint of the packed layouts: a hash of the bytes pack_matrix writes for a fixed matrix of each
// packable type. It changes whenever a layout does, so packed copies kept on disk by an older build are
// never read as if they were current (model/packed_cache.h).
uint64_t packed_layout_fingerprint();

// Owns packed copies of matrices: made by add (in a block reserved for them, or one 4096-byte aligned
// allocation each), or views into a read-only mapping of a file that holds them (model/packed_cache.h).
class PackedStore {
 public:
  // The bytes add takes for w's copy from a reserved block (0 for a matrix that gets none).
  static size_t reserved_bytes(const MatrixView& w);
  // One block of `bytes` (the sum of reserved_bytes over the matrices about to be added) that the
  // following add calls take their copies from, back to back, in transparent huge pages where it is
  // 2 MiB or more (allocate_large). Without it, or once it is used up (or where it could not be had),
  // each copy is an allocation of its own.
  void reserve(size_t bytes);
  // Packs w if wants_packed_copy(w); returns w with `packed` set (or w unchanged).
  MatrixView add(const MatrixView& w, ThreadPool* pool);
  // Keeps a mapping (released with munmap) whose bytes hold packed copies.
  void adopt_mapping(void* base, size_t length);
  // Keeps a block from allocate_large (gguf/large_alloc.h; released with free_large) whose bytes hold
  // packed copies (read from a cache file, or reserved for add): memory of this process, not a file
  // mapping (not among mappings()).
  void adopt_memory(void* block, size_t length);
  // w with `packed` pointing at `copy` (inside an adopted mapping, packed_matrix_bytes(w) bytes).
  MatrixView attach(const MatrixView& w, const uint8_t* copy);
  size_t bytes() const { return bytes_; }
  // The adopted mappings (a packed-weight cache file), in the order adopted.
  std::vector<ByteSpan> mappings() const;

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  struct Unmap {
    size_t length;
    void operator()(void* p) const;
  };
  std::vector<std::unique_ptr<uint8_t, Free>> buffers_;
  struct FreeLarge {
    size_t length;
    void operator()(void* p) const;
  };
  std::vector<std::unique_ptr<void, Unmap>> mappings_;
  std::vector<std::unique_ptr<void, FreeLarge>> memory_;
  uint8_t* reserved_ = nullptr;  // the rest of the reserved block: where add's next copy goes
  size_t reserved_left_ = 0;
  size_t bytes_ = 0;
};

}  // namespace gem4
