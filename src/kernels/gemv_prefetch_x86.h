// The decode GEMVs' software prefetch on x86, as GemvPrefetch (matmul_internal.h) says, for a block of
// `bytes` at p that the kernel is about to read.
#pragma once
#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/matmul_internal.h"
#include "kernels/page_heads.h"

namespace gem4::matmul_detail {

template <GemvPrefetch kPf>
inline void gemv_prefetch(const uint8_t* p, size_t bytes) {
  if constexpr (kPf.page_heads) {
    prefetch_page_head(p, bytes);
  } else {
#pragma GCC unroll 17
    for (size_t line = 0; line < bytes; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(p + kPf.l1 + line),
                   kPf.l1_non_temporal ? _MM_HINT_NTA : _MM_HINT_T0);
      if constexpr (kPf.l2 != 0) _mm_prefetch(reinterpret_cast<const char*>(p + kPf.l2 + line), _MM_HINT_T1);
    }
  }
}

// A compiler barrier that keeps the loads written after it (a block's scales) after those written
// before it (the block's levels). A packed block keeps its scales in its last line; without the barrier
// GCC hoisted that load above half of the levels, and a block read out of address order streams from
// memory more slowly (the hardware prefetchers follow the order of the demand misses). The barrier fixes
// the order of the loads in the machine code, which the CPU issues them in when their addresses are
// ready, as here. Measured where it is used.
inline void keep_load_order() { asm volatile("" ::: "memory"); }

}  // namespace gem4::matmul_detail
