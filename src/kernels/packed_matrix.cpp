#include "kernels/packed_matrix.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "tensor/blocks.h"

namespace gem4 {

namespace {

constexpr size_t kScaleBytes = kPackedPanelRows * sizeof(uint16_t);

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Groups of 4 elements whose bytes one 64-byte lane vector holds per half: 8 for Q8_0 (a byte per
// element), 4 for Q4_0 (two nibbles per byte: elements 4g.. in the low, 16+4g.. in the high nibbles).
template <class Block, int kGroups, uint32_t kXor>
void pack_panel(const MatrixView& w, int64_t p, uint8_t* dst) {
  const int64_t nb = w.in / kQK;
  const size_t block_bytes = size_t(kGroups) * 128 + kScaleBytes;
  const Block* rows[kPackedPanelRows];
  for (int j = 0; j < kPackedPanelRows; ++j) {
    const int64_t o = std::min<int64_t>(p * kPackedPanelRows + j, w.out - 1);
    rows[j] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) + size_t(o) * w.row_bytes);
  }
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

}  // namespace

namespace {
std::atomic<bool> g_use_packed{true};
}  // namespace

void set_use_packed(bool on) { g_use_packed.store(on, std::memory_order_relaxed); }
bool use_packed() { return g_use_packed.load(std::memory_order_relaxed); }

bool packable_type(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0; }

size_t packed_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0:
      return 8 * 128 + kScaleBytes;
    case GgmlType::Q4_0:
      return 4 * 128 + kScaleBytes;
    default:
      return 0;
  }
}

size_t packed_matrix_bytes(const MatrixView& w) {
  const int64_t panels = (w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  return size_t(panels) * size_t(w.in / kQK) * packed_block_bytes(w.type);
}

void pack_matrix(const MatrixView& w, uint8_t* dst, ThreadPool* pool) {
  const int64_t panels = (w.out + kPackedPanelRows - 1) / kPackedPanelRows;
  const size_t panel_bytes = size_t(w.in / kQK) * packed_block_bytes(w.type);
  parallel_for(pool, panels, 1, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) {
      uint8_t* out = dst + size_t(p) * panel_bytes;
      if (w.type == GgmlType::Q8_0) {
        pack_panel<BlockQ8_0, 8, 0x80808080u>(w, p, out);  // signed q to unsigned q + 128
      } else {
        pack_panel<BlockQ4_0, 4, 0u>(w, p, out);
      }
    }
  });
}

void PackedStore::Free::operator()(uint8_t* p) const { std::free(p); }

MatrixView PackedStore::add(const MatrixView& w, ThreadPool* pool) {
  if (!packable_type(w.type) || active_isa() != Isa::Avx512 || w.out == 0 || w.in % kQK != 0) return w;
  const size_t bytes = packed_matrix_bytes(w);
  const size_t alloc = (bytes + 4095) / 4096 * 4096;
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(4096, alloc));
  if (!mem) throw std::bad_alloc();
  // No MADV_HUGEPAGE: on the target VMs it made loading an E2B Q4_0 file 0.8-2.3 s instead of
  // 0.6 s (the kernel compacts memory to find 2 MiB pages) and decode no faster.
  buffers_.emplace_back(mem);
  pack_matrix(w, mem, pool);
  bytes_ += bytes;
  MatrixView v = w;
  v.packed = mem;
  return v;
}

}  // namespace gem4
