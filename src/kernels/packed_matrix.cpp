#include "kernels/packed_matrix.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "gguf/large_alloc.h"
#include "kernels/cpu_features.h"
#include "kernels/fnv1a.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"

namespace gem4 {

namespace {

constexpr size_t kScaleBytes = kPackedPanelRows * sizeof(uint16_t);

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store_u32(void* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }

// The GGUF blocks of panel p's 32 rows (rows past the end repeat the last row).
template <class Block>
void panel_rows(const MatrixView& w, int64_t p, const Block* rows[kPackedPanelRows]) {
  for (int j = 0; j < kPackedPanelRows; ++j) {
    const int64_t o = std::min<int64_t>(p * kPackedPanelRows + j, w.out - 1);
    rows[j] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) + size_t(o) * w.row_bytes);
  }
}

// Groups of 4 elements whose bytes one 64-byte lane vector holds per half: 8 for Q8_0 (a byte per
// element), 4 for Q4_0 (two nibbles per byte: elements 4g.. in the low, 16+4g.. in the high nibbles).
template <class Block, int kGroups, uint32_t kXor>
void pack_panel(const MatrixView& w, int64_t p, uint8_t* dst) {
  const int64_t nb = w.in / kQK;
  const size_t block_bytes = size_t(kGroups) * 128 + kScaleBytes;
  const Block* rows[kPackedPanelRows];
  panel_rows(w, p, rows);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = dst + size_t(b) * block_bytes;
    for (int g = 0; g < kGroups; ++g) {
      for (int h = 0; h < 2; ++h) {
        auto* lanes = reinterpret_cast<uint32_t*>(out + g * 128 + h * 64);
        for (int j = 0; j < 16; ++j) lanes[j] = load_u32(rows[16 * h + j][b].qs + 4 * g) ^ kXor;
      }
    }
    auto* scales = reinterpret_cast<uint16_t*>(out + kGroups * 128);
    for (int j = 0; j < kPackedPanelRows; ++j) scales[j] = rows[j][b].d;
  }
}

// Q4_K: per super-block the rows' fp16 d and dmin, then per 32-element sub-block the levels re-nibbled
// as Q4_0 packs them (low nibble element 4g + k, high nibble element 16 + 4g + k), the rows' 6-bit
// scales and mins as bytes. The kernels form float(sc) * d and float(m) * -dmin, as DecodeQ4_K does
// from the GGUF block, so packed and GGUF-layout kernels agree bit for bit.
// Q5_K (Bits5): the same with the levels' bit 4 (bit t of qh[l] for sub-block t) after the nibbles.
template <class Block, bool Bits5>
void pack_panel_kquant(const MatrixView& w, int64_t p, uint8_t* dst) {
  constexpr size_t kHeader = Bits5 ? kPackedQ5KHeaderBytes : kPackedQ4KHeaderBytes;
  constexpr size_t kBlockBytes = Bits5 ? kPackedQ5KBlockBytes : kPackedQ4KBlockBytes;
  constexpr size_t kSuperBytes = Bits5 ? kPackedQ5KSuperBytes : kPackedQ4KSuperBytes;
  constexpr size_t kScales = Bits5 ? 640 : 512;
  const int64_t n_super = w.in / kQKK;
  const Block* rows[kPackedPanelRows];
  panel_rows(w, p, rows);
  for (int64_t sb = 0; sb < n_super; ++sb) {
    uint8_t* super = dst + size_t(sb) * kSuperBytes;
    for (int j = 0; j < kPackedPanelRows; ++j) {
      const Block& blk = rows[j][sb];
      reinterpret_cast<uint16_t*>(super)[j] = blk.d;
      reinterpret_cast<uint16_t*>(super + 64)[j] = blk.dmin;
      // The 6-bit scales and mins of the 8 sub-blocks (see k_scales_mins in block_decode_avx512.h).
      uint8_t sc[8], mn[8];
      for (int t = 0; t < 4; ++t) {
        sc[t] = blk.scales[t] & 63;
        mn[t] = blk.scales[t + 4] & 63;
        sc[t + 4] = uint8_t((blk.scales[t + 8] & 0x0F) | ((blk.scales[t] >> 6) << 4));
        mn[t + 4] = uint8_t((blk.scales[t + 8] >> 4) | ((blk.scales[t + 4] >> 6) << 4));
      }
      for (int t = 0; t < 8; ++t) {
        uint8_t* out = super + kHeader + size_t(t) * kBlockBytes;
        // Four elements at a time in a 32-bit word (SWAR): this runs once per weight at load time.
        const uint8_t* qs = blk.qs + 32 * (t / 2);
        const int shift = 4 * (t % 2);
        const int h = j / 16, lane = j % 16;
        for (int g = 0; g < 4; ++g) {
          const uint32_t lo = (load_u32(qs + 4 * g) >> shift) & 0x0F0F0F0Fu;
          const uint32_t hi = (load_u32(qs + 16 + 4 * g) >> shift) & 0x0F0F0F0Fu;
          store_u32(out + g * 128 + h * 64 + lane * 4, lo | (hi << 4));
        }
        if constexpr (Bits5) {
          uint32_t bits = 0;  // byte k, bit g: bit t of qh[4g + k]
          for (int g = 0; g < 8; ++g) bits |= ((load_u32(blk.qh + 4 * g) >> t) & 0x01010101u) << g;
          store_u32(out + 512 + h * 64 + lane * 4, bits);
        }
        out[kScales + j] = sc[t];
        out[kScales + 32 + j] = mn[t];
      }
    }
  }
}

// Q6_K: per super-block (8 blocks of 32 elements) first the 32 rows' fp16 d, then per block the levels
// u = 0..63 (weight = d sc (u - 32)) in six 128-byte slot vectors (half h, lane j: row 16h + j, byte k:
// element 4G + k), then the rows' int8 scales of the block's two halves (32 + 32 bytes). Slot s holds
// group G = kQ6KSlotGroup[s]'s levels in bits 0-5 and, in bits 6-7, bits 2(s / 2), 2(s / 2) + 1 of
// group 6 + s % 2's: a level is one AND away (groups 0-5), three shifts for groups 6 and 7, where
// the 4 + 2-bit split took a shift or two for every group.
void pack_panel_q6_k(const MatrixView& w, int64_t p, uint8_t* dst) {
  const int64_t n_super = w.in / kQKK;
  const BlockQ6_K* rows[kPackedPanelRows];
  panel_rows(w, p, rows);
  for (int64_t sb = 0; sb < n_super; ++sb) {
    uint8_t* super = dst + size_t(sb) * kPackedQ6KSuperBytes;
    for (int j = 0; j < kPackedPanelRows; ++j) {
      const BlockQ6_K& blk = rows[j][sb];
      reinterpret_cast<uint16_t*>(super)[j] = blk.d;
      const int h = j / 16, lane = j % 16;
      for (int t = 0; t < 8; ++t) {  // block t: quarter q of half hh of the super-block (ggml's layout)
        const int hh = t / 4, q = t % 4;
        uint8_t* out = super + kPackedQ6KHeaderBytes + size_t(t) * kPackedQ6KBlockBytes;
        // Four elements at a time in a 32-bit word (SWAR): this runs once per weight at load time.
        const uint8_t* ql = blk.ql + 64 * hh + 32 * (q % 2);
        const uint8_t* qh = blk.qh + 32 * hh;
        const int shift = q < 2 ? 0 : 4;
        uint32_t u[8];  // group G's four levels
        for (int g = 0; g < 8; ++g)
          u[g] = ((load_u32(ql + 4 * g) >> shift) & 0x0F0F0F0Fu) |
                 (((load_u32(qh + 4 * g) >> (2 * q)) & 0x03030303u) << 4);
        for (int slot = 0; slot < 6; ++slot) {
          const uint32_t carried = (u[6 + slot % 2] >> (2 * (slot / 2))) & 0x03030303u;
          store_u32(out + slot * 128 + h * 64 + lane * 4, u[kQ6KSlotGroup[slot]] | carried << 6);
        }
        reinterpret_cast<int8_t*>(out + 768)[j] = blk.scales[2 * t];
        reinterpret_cast<int8_t*>(out + 768 + 32)[j] = blk.scales[2 * t + 1];
      }
    }
  }
}

// F32: per element k the panel's 32 rows, rows 16h..16h+15 in the 64 bytes of half h.
void pack_panel_f32(const MatrixView& w, int64_t p, uint8_t* dst) {
  const float* rows[kPackedPanelRows];
  panel_rows(w, p, rows);
  auto* out = reinterpret_cast<float*>(dst);
  for (int64_t k = 0; k < w.in; ++k)
    for (int j = 0; j < kPackedPanelRows; ++j) out[k * kPackedPanelRows + j] = rows[j][k];
}

}  // namespace

namespace {
std::atomic<bool> g_use_packed{true};
}  // namespace

void set_use_packed(bool on) { g_use_packed.store(on, std::memory_order_relaxed); }
bool use_packed() { return g_use_packed.load(std::memory_order_relaxed); }

// Every SIMD set reads the packed layout (the 256-bit sets as two halves of each 64-byte vector).
// The x86 sets only: the AArch64 sets read the GGUF layout.
bool packed_kernels_active() {
  const Isa isa = active_isa();
  return isa == Isa::Avx2 || isa == Isa::AvxVnni || isa == Isa::Avx512;
}

bool reads_packed(const MatrixView& w) { return w.packed && use_packed() && packed_kernels_active(); }

ByteSpan streamed_weights(const MatrixView& w) {
  if (reads_packed(w)) return {w.packed, packed_matrix_bytes(w)};
  return {static_cast<const uint8_t*>(w.data), w.row_bytes * size_t(w.out)};
}

bool packable_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
         t == GgmlType::Q6_K;
}

bool has_packed_layout(GgmlType t) { return t == GgmlType::F32 || packable_type(t); }

size_t packed_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return kPackedF32BlockBytes;
    case GgmlType::Q8_0:
      return 8 * 128 + kScaleBytes;
    case GgmlType::Q4_0:
      return 4 * 128 + kScaleBytes;
    case GgmlType::Q4_K:
      return kPackedQ4KSuperBytes / 8;  // the average, as for Q6_K
    case GgmlType::Q5_K:
      return kPackedQ5KSuperBytes / 8;
    case GgmlType::Q6_K:
      return kPackedQ6KSuperBytes / 8;  // the average: the super-block header is spread over its 8 blocks
    default:
      return 0;
  }
}

size_t packed_matrix_bytes(const MatrixView& w) {
  const int64_t panels = (w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  return size_t(panels) * size_t(w.in / kQK) * packed_block_bytes(w.type);
}

void pack_panel(const MatrixView& w, int64_t p, uint8_t* out) {
  if (w.type == GgmlType::F32) {
    pack_panel_f32(w, p, out);
  } else if (w.type == GgmlType::Q8_0) {
    pack_panel<BlockQ8_0, 8, 0x80808080u>(w, p, out);  // signed q to unsigned q + 128
  } else if (w.type == GgmlType::Q4_0) {
    pack_panel<BlockQ4_0, 4, 0u>(w, p, out);
  } else if (w.type == GgmlType::Q4_K) {
    pack_panel_kquant<BlockQ4_K, false>(w, p, out);
  } else if (w.type == GgmlType::Q5_K) {
    pack_panel_kquant<BlockQ5_K, true>(w, p, out);
  } else {
    pack_panel_q6_k(w, p, out);
  }
}

void pack_matrix(const MatrixView& w, uint8_t* dst, ThreadPool* pool) {
  const int64_t panels = (w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  const size_t panel_bytes = size_t(w.in / kQK) * packed_block_bytes(w.type);
  parallel_for(pool, panels, 1, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) pack_panel(w, p, dst + size_t(p) * panel_bytes);
  });
}

bool wants_packed_copy(const MatrixView& w) {
  return has_packed_layout(w.type) && packed_kernels_active() && w.out > 0 && w.in > 0 && w.in % kQK == 0;
}

uint64_t packed_layout_fingerprint() {
  // 33 rows (a whole panel and a padded one) of 512 elements (two K-quant super-blocks), from a fixed
  // byte sequence: every layout rule (interleaving, padding, scale placement) shows in the hash.
  constexpr int64_t kRows = 33, kIn = 512;
  uint64_t h = kFnv1aOffsetBasis;
  for (GgmlType t :
       {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const size_t row_bytes = ggml_row_bytes(t, kIn);
    std::vector<uint8_t> src(row_bytes * kRows);
    uint32_t state = 12345u + uint32_t(t);
    for (uint8_t& b : src) {
      state = state * 1664525u + 1013904223u;
      b = uint8_t(state >> 24);
    }
    MatrixView w;
    w.type = t;
    w.data = src.data();
    w.in = kIn;
    w.out = kRows;
    w.row_bytes = row_bytes;
    std::vector<uint8_t> dst(packed_matrix_bytes(w));
    pack_matrix(w, dst.data(), nullptr);
    const uint32_t tag = uint32_t(t);
    h = fnv1a(&tag, sizeof tag, h);
    h = fnv1a(dst.data(), dst.size(), h);
  }
  return h;
}

void PackedStore::Free::operator()(uint8_t* p) const { std::free(p); }
void PackedStore::Unmap::operator()(void* p) const { munmap(p, length); }

void PackedStore::adopt_mapping(void* base, size_t length) {
  mappings_.push_back(std::unique_ptr<void, Unmap>(base, Unmap{length}));
}

void PackedStore::FreeLarge::operator()(void* p) const { free_large(p, length); }

void PackedStore::adopt_memory(void* block, size_t length) {
  memory_.push_back(std::unique_ptr<void, FreeLarge>(block, FreeLarge{length}));
}

std::vector<ByteSpan> PackedStore::mappings() const {
  std::vector<ByteSpan> out;
  for (const auto& m : mappings_)
    out.push_back({static_cast<const uint8_t*>(m.get()), m.get_deleter().length});
  return out;
}

MatrixView PackedStore::attach(const MatrixView& w, const uint8_t* copy) {
  bytes_ += packed_matrix_bytes(w);
  MatrixView v = w;
  v.packed = copy;
  return v;
}

size_t PackedStore::reserved_bytes(const MatrixView& w) {
  return wants_packed_copy(w) ? (packed_matrix_bytes(w) + 63) / 64 * 64 : 0;  // the kernels' alignment
}

// One block for all the copies a load makes, in transparent huge pages (allocate_large: 2 MiB aligned,
// MADV_HUGEPAGE): one page fault per 2 MiB instead of 512, and decode's page walks over gigabytes of
// weights fewer, without the rounding of every copy up to 2 MiB that a block each would cost (E2B Q4_0:
// 1.54 GiB resident against 1.38). Zen 5 VM, 2026-12-08, runs alternated: the 31B Q4_0 packed at load
// (`--pack-cache off`) ready in 14.2, 19.3 s against 44.4, 41.8 s in 4 KiB pages; E2B Q4_0 1.1, 1.0 s
// against 5.7, 4.0; `gem4 bench` building E2B Q8_0 in memory 18.1, 15.3 against 22.0, 19.0 (those with a
// block per copy); with this one block the 26B-A4B in 21.9, 18.0 s against 44.0, 46.9. On the VMs
// of 2026-11 huge pages had made E2B's load slower (0.8-2.3 s against 0.6: the kernel compacting
// memory); the faults cost more than that on today's. Under ASan (kLargeBlocksMapped false) no block:
// its allocations are not 64-byte aligned, and copies of their own let it watch each one.
void PackedStore::reserve(size_t bytes) {
  if (!kLargeBlocksMapped || bytes < kLargeBlockBytes) return;
  void* block = nullptr;
  try {
    block = allocate_large(bytes, Pages::Huge);
  } catch (const std::bad_alloc&) {
    return;  // no such block to be had: a copy of its own each, as without reserve
  }
  adopt_memory(block, bytes);
  reserved_ = static_cast<uint8_t*>(block);
  reserved_left_ = bytes;
}

MatrixView PackedStore::add(const MatrixView& w, ThreadPool* pool) {
  if (!wants_packed_copy(w)) return w;
  const size_t bytes = packed_matrix_bytes(w);
  uint8_t* mem = nullptr;
  if (const size_t take = reserved_bytes(w); take <= reserved_left_) {
    mem = reserved_;
    reserved_ += take;
    reserved_left_ -= take;
  } else {
    const size_t alloc = (bytes + 4095) / 4096 * 4096;
    mem = static_cast<uint8_t*>(std::aligned_alloc(4096, alloc));
    if (!mem) throw std::bad_alloc();
    buffers_.emplace_back(mem);
  }
  pack_matrix(w, mem, pool);
  bytes_ += bytes;
  MatrixView v = w;
  v.packed = mem;
  return v;
}

}  // namespace gem4
