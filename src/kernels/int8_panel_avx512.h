// Internal to the AVX-512 int8 kernels (matmul_avx512.cpp, matmul_packed_avx512.cpp): the layout of
// the register panels the int8 GEMM tile reads. Include only from files compiled with the AVX-512 flags.
//
// A panel holds 32 weight rows repacked so that one zmm holds 4 consecutive levels of 16 rows (one row
// per 32-bit lane). Per 32-element block: 8 groups x 2 halves x 64 bytes of levels, then the 32 weight
// scales as f32 (for Q6_K a second set for the block's upper 16 elements), then the mins (types with one).
#pragma once
#include <cstddef>

#include "kernels/block_decode_avx512.h"

namespace gem4::matmul_detail::avx512 {

constexpr int kPanelRows = 32;
constexpr size_t kPanelQuantBytes = 8 * 2 * 64;

template <class Dec>
struct PanelLayout {
  static constexpr size_t kScale = kPanelQuantBytes;
  static constexpr size_t kScaleHi = kScale + 128;                          // kSplitScales only
  static constexpr size_t kMin = kScaleHi + (Dec::kSplitScales ? 128 : 0);  // kHasMin only
  static constexpr size_t kBlockBytes = kMin + (Dec::kHasMin ? 128 : 0);
};

}  // namespace gem4::matmul_detail::avx512
